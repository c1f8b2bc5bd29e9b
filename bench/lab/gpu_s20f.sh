#!/usr/bin/env bash
# bench/lab/gpu_s20f.sh -- session 20, H200 call 6: two6 (two query tiles per CTA in one Q space:
# the next tile's Q lands while this one runs; 6 stages; bench/lab/ext20_two6.patch), four6 (four),
# s7p (the 7th stage in Q's space for the pair-step instance only) against meta. Narrow libraries
# timed by bench/lab/ext20_stamps.py (times only); then the extend tests on two6.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20f /tmp/out
CELLS="${CELLS:-1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,1:4096:2048,16:4096:2048}"
for tag in ${TAGS:-meta two6 s7p four6 meta two6 s7p four6}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 0 --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-1}" == 1 ]]; then
  for tt in ${TEST_TAGS:-two6 four6}; do
    RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tt.so" run_logged "extend tests $tt" "$OUT/pytest_$tt.txt" 240 \
      python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py -k "extend"
    grep -E "^E .*Error" "$OUT/pytest_$tt.txt" | sort | uniq -c | head
    grep -E "^FAILED" "$OUT/pytest_$tt.txt" | grep -v "unsupported" | head -5
  done
fi
( cd "$OUT" && tar czf /tmp/s20f.tgz . && rm -rf ./* && mv /tmp/s20f.tgz . )
stamp done
