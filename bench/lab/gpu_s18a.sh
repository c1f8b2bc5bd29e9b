#!/usr/bin/env bash
# bench/lab/gpu_s18a.sh -- session 18, H200 call 1.
#   (a) FP8 decode whose one-block-per-SM shape runs 8 warps of 3 stages instead of 4 of 6
#       (.carry/var_w8.so, a narrow library from bench/lab/prebuild_variants.sh) against this
#       checkout's full library (.carry/radixkv_kernels_sm90.so, bench/prebuild.sh): the FP8 decode
#       tests on the variant, then bench/kernels_fp8.py --no-extend in the order main, w8, w8, main;
#   (b) bf16 decode on the full library, uniform and ragged cells with the same-size read
#       (bench/kernels.py);
#   (c) the extend tests of pair steps and the extend grid on the full library (pair steps from
#       max_kv_len >= 2048).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s18a /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
full="$RADIXKV_PREBUILT_LIB"
w8="$PWD/.carry/var_w8.so"
RADIXKV_PREBUILT_LIB="$w8" run_logged tests_w8 "$OUT/tests_w8.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_fp8_gpu.py tests/test_kernels_gpu.py -k "decode and not extend"
grep -E "^FAILED" "$OUT/tests_w8.txt" | grep -v unsupported | head -20
i=0
for tag in main w8 w8 main; do
  i=$((i + 1))
  lib="$full"; [[ $tag == w8 ]] && lib="$w8"
  RADIXKV_PREBUILT_LIB="$lib" run_logged "fp8_$tag" "$OUT/fp8_${i}_$tag.log" 120 \
    python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8_${i}_$tag"
  grep -E "geomean|read stream" "$OUT/fp8_${i}_$tag.log" | head -4
done
RADIXKV_PREBUILT_LIB="$full" run_logged decode "$OUT/decode.log" 150 \
  python3 bench/kernels.py --no-extend --no-sweep --no-write-column --ragged --page-sizes 1,16 --out "$OUT/dec"
tail -12 "$OUT/decode.log"
RADIXKV_PREBUILT_LIB="$full" run_logged ext_tests "$OUT/ext_tests.txt" 120 python3 -m pytest -q -p no:cacheprovider \
  tests/test_extend_gpu.py -k "pair or long or plan_order or short_context"
grep -E "^FAILED|^ERROR" "$OUT/ext_tests.txt" | head -20
RADIXKV_PREBUILT_LIB="$full" run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
rm -f "$OUT"/*/*.png
# The device returns at most 8 files: one archive.
( cd "$OUT" && tar czf /tmp/s18a.tgz . && rm -rf ./* && mv /tmp/s18a.tgz . )
stamp done
