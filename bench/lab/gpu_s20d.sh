#!/usr/bin/env bash
# bench/lab/gpu_s20d.sh -- session 20, H200 call 4: two query tiles per CTA ("two": /tmp/two's hip/,
# bench/lab/ext20_two.patch) against main with the one-round-trip metadata ("meta"), narrow
# libraries timed by bench/lab/ext20_stamps.py (times only), alternating; then the extend tests on
# two's library. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20d /tmp/out
CELLS="${CELLS:-1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,1:4096:2048,16:4096:2048}"
for tag in ${TAGS:-meta two meta two}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 0 --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-1}" == 1 ]]; then
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${TEST_TAG:-two}.so" run_logged "extend tests" "$OUT/pytest.txt" 240 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py -k "extend"
  tail -2 "$OUT/pytest.txt"
  grep -E "^E .*Error" "$OUT/pytest.txt" | sort | uniq -c | head
fi
( cd "$OUT" && tar czf /tmp/s20d.tgz . && rm -rf ./* && mv /tmp/s20d.tgz . )
stamp done
