#!/usr/bin/env bash
# bench/lab/gpu_s20h.sh -- session 20, H200 call 8: main, the final hip/ ("fin") and the final hip/ with
# the request metadata by ld.global.nc ("finnc"), narrow libraries, three rounds rotated, the op
# called as bench/kernels_extend.py's grid calls it (with the extend plan: --plan). Times only.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20h /tmp/out
CELLS="${CELLS:-1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:4096:128,16:4096:128,1:0:2048,1:1024:2048}"
for tag in ${TAGS:-main fin finnc main fin finnc main fin finnc}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 0 --plan --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-0}" == 1 ]]; then
  for tt in ${TEST_TAGS:-two6 four6}; do
    RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tt.so" run_logged "extend tests $tt" "$OUT/pytest_$tt.txt" 240 \
      python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py -k "extend"
    grep -E "^E .*Error" "$OUT/pytest_$tt.txt" | sort | uniq -c | head
    grep -E "^FAILED" "$OUT/pytest_$tt.txt" | grep -v "unsupported" | head -5
  done
fi
( cd "$OUT" && tar czf /tmp/s20h.tgz . && rm -rf ./* && mv /tmp/s20h.tgz . )
stamp done
