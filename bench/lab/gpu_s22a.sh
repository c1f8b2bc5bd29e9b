#!/usr/bin/env bash
# bench/lab/gpu_s22a.sh -- session 22, first H200 call: branch ext-persist's hip/ (the single-tile
# extend_ws instance persistent in its lab form, bench/lab/ext21_pst_branch.patch) against main,
# narrow libraries .carry/var_main.so and .carry/var_pst.so. First the d128 cases of
# test_more_queries_than_keys on main's hip/ (never run on it), the extend tests on the branch;
# then each library in its own process, order main pst main pst, on the 14 extend_ws cells and
# the ragged "fresh" batch (bench/lab/ext21_ab.py: median time and output digest per cell).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22a /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_main.so" run_logged "more-queries tests main" "$OUT/pytest_mq_main.txt" 60 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k more_queries_than_keys
grep -E "passed|failed" "$OUT/pytest_mq_main.txt" | tail -2
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_pst.so" run_logged "extend tests pst" "$OUT/pytest_pst.txt" 90 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
grep -E "passed|failed" "$OUT/pytest_pst.txt" | tail -2
grep -E "^FAILED" "$OUT/pytest_pst.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_pst.txt")"
CELLS="1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048,1:fresh,16:fresh"
for tag in main pst main pst; do
  log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 100 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "${tag}" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $tag rc=$?"
  grep -E "^$tag " "$log" | awk '{print $2, $3}' | tr '\n' ';'; echo
done
grep -h -E "^(main|pst) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $1, $2, $5}' | uniq -c | head -40
stamp done
