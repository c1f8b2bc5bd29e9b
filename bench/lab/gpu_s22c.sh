#!/usr/bin/env bash
# bench/lab/gpu_s22c.sh -- session 22, third H200 call: does persistence pay on the pair-step
# cells at an equal step size? Narrow libraries of main (.carry/var_new.so: the persistent single-tile
# instance) and of the previous main (.carry/var_main.so: the same instance one CTA per tile); each
# in its own process (bench/lab/ext21_ab.py), order new newz oldz, twice: `new` as the grid calls the
# op (pairs from 2048 keys), `newz` / `oldz` with max_kv_len = 0 (the single-tile instance on every
# cell, persistent / one CTA per tile). Then the short-context crossover: bench/lab/ext21_small.py
# at E = 256 and 384 (the two-CTA kernel against the persistent extend_ws, max_kv_len = 0).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22c /tmp/out
CELLS="1:0:2048,16:0:2048,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048,1:chunked,16:chunked,1:multi-turn,1:short,16:short"
for round in 1 2; do
  for spec in new:new: newz:new:--max-kv=0 oldz:main:--max-kv=0; do
    IFS=: read -r tag lib flag <<< "$spec"
    log="$OUT/ab_${tag}_$round.log"
    RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$lib.so" timeout 100 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
      --tag "$tag" $flag --out "$OUT/ab_${tag}_$round" > "$log" 2>&1
    stamp "ab $tag rc=$?"
    grep -E "^$tag " "$log" | awk '{print $2, $3}' | tr '\n' ';'; echo
  done
done
for e in 256 384; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_new.so" run_logged "small $e" "$OUT/small$e.log" 60 \
    python3 bench/lab/ext21_small.py --rounds 3 --extend $e --out "$OUT/small$e.json"
  tail -3 "$OUT/small$e.log"
done
grep -h -E "^(new|newz|oldz) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $1, $2, $5}' | uniq -c | head -60
stamp done
