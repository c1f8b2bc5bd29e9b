#!/usr/bin/env bash
# bench/lab/gpu_s21h.sh -- session 21, eighth H200 call: why the grid of call 7 timed the persistent
# single-tile instance 6-8% slower than call 6's lab A/B timed it faster. Full libraries of call 3
# (.carry/var_old.so, one CTA per tile) and call 7 (.carry/var_new.so, persistent), each in its own
# process, order old new old new, on the single-tile cells (bench/lab/ext21_ab.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21h /tmp/out
CELLS="1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:0:2048"
for tag in old new old new; do
  log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 60 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "${tag}" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $tag rc=$?"
  grep -E "^$tag " "$log" | awk '{print $2, $3, $5}' | tr '\n' ';'; echo
done
stamp done
