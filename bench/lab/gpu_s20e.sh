#!/usr/bin/env bash
# bench/lab/gpu_s20e.sh -- session 20, H200 call 5: the ring's depth. s7: 16-bit caches get a 7th stage in
# the Q tile's space once the consumers hold Q in registers (bench/lab/ext20_s7.patch); s5: 5 stages
# (the sensitivity check); meta: main with the one-round-trip metadata. Narrow libraries timed by
# bench/lab/ext20_stamps.py (times only); then the extend tests on s7. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20e /tmp/out
CELLS="${CELLS:-1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,1:4096:2048,16:4096:2048}"
for tag in ${TAGS:-meta s7 s5 meta s7}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 0 --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-1}" == 1 ]]; then
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${TEST_TAG:-s7}.so" run_logged "extend tests" "$OUT/pytest.txt" 240 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py -k "extend"
  tail -2 "$OUT/pytest.txt"
  grep -E "^E .*Error" "$OUT/pytest.txt" | sort | uniq -c | head
fi
( cd "$OUT" && tar czf /tmp/s20e.tgz . && rm -rf ./* && mv /tmp/s20e.tgz . )
stamp done
