#!/usr/bin/env bash
# bench/lab/gpu_s23c.sh -- session 23, third H200 call. (1) Per-slot stamps of qip (var_qipp: the
# slot ring, consumers load their own Q rows, and the producer prefetches each slot's Q rows into
# L2 when it resolves the slot; plus the probe). (2) A/B, each library in its own process, two
# rounds in rotated order: main, qi, qip, qr; default max_kv_len and max_kv_len = 0.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23c /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qipp.so" timeout 120 python3 bench/lab/ext23_stamps.py \
  --cells 1:tiny,1:short,1:0:512,1:1024:512 --out "$OUT/stamps" > "$OUT/stamps.txt" 2>&1
stamp "stamps rc=$?"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qipp.so" timeout 60 python3 bench/lab/ext23_stamps.py \
  --cells 1:0:2048 --max-kv 0 --out "$OUT/stamps" >> "$OUT/stamps.txt" 2>&1
stamp "stamps p0 rc=$?"
ab() {  # tag extra-args...
  local tag="$1"; shift
  local log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${tag%%_*}.so" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" "$@" > "$log" 2>&1
  stamp "ab $tag rc=$?"
}
CELLS="1:0:512,16:0:512,1:0:2048,16:0:2048,1:1024:128,1:1024:512,16:1024:512,1:fresh,1:short,1:tiny,16:tiny"
for tag in main qi qip qr qr qip qi main; do ab $tag; done
CELLS="1:0:128,1:0:2048,16:0:2048,1:1024:2048,1:4096:2048"
for tag in main_p0 qi_p0 qip_p0 qr_p0 qr_p0 qip_p0 qi_p0 main_p0; do ab $tag --max-kv 0; done
grep -h -E "^(main|qr|qi)" "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
rm -rf "$OUT"/ab_[0-9]* "$OUT"/ab_*.log
echo "== stamps"; grep -v "^\[" "$OUT/stamps.txt" | tail -8
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
stamp done
