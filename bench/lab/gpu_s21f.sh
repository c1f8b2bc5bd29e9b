#!/usr/bin/env bash
# bench/lab/gpu_s21f.sh -- session 21, sixth H200 call: a persistent extend_ws (lab patch
# bench/lab/ext21_pst.patch: one CTA per SM over the rank-order slots, the ring running on across a
# CTA's tiles) against main, narrow libraries .carry/var_main.so and .carry/var_pst.so, each in its
# own process, order main pst main pst (bench/lab/ext21_ab.py: time and output digest per cell);
# then the extend tests on the persistent library (cases outside the narrow set fail "unsupported").
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21f /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_pst.so" run_logged "extend tests pst" "$OUT/pytest_pst.txt" 90 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
rc=$?
grep -E "passed|failed" "$OUT/pytest_pst.txt" | tail -2
grep -E "^FAILED" "$OUT/pytest_pst.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_pst.txt")"
[[ $rc -eq 124 ]] && { stamp "tests timed out: no timing"; exit 0; }
CELLS="1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048"
for tag in main pst main pst; do
  log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 100 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "${tag}" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $tag rc=$?"
  grep -E "^$tag " "$log" | awk '{print $2, $3}' | tr '\n' ';'; echo
done
grep -h -E "^(main|pst) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $1, $2, $5}' | uniq -c | head -40
stamp done
