#!/usr/bin/env bash
# bench/lab/gpu_ext17.sh -- one H200 call (session 17): FP8 extend with S = Q K^T as FP8 products
# (each row of q split into two e4m3 terms; K read as bytes, no conversion). The full library of
# bench/prebuild.sh (this checkout's hip/) and, for the A/B in the same call, main's narrow library
# (.carry/var_main.so, bench/lab/prebuild_variants.sh main=<commit>): the FP8 and extend GPU tests,
# bench/kernels_fp8.py --no-decode on both libraries (old, new, old), then the other GPU test files.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext17 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
new_lib="$RADIXKV_PREBUILT_LIB"
run_logged fp8tests "$OUT/fp8tests.txt" 200 python3 -m pytest -q -p no:cacheprovider -s \
  tests/test_fp8_gpu.py tests/test_extend_gpu.py
grep -E "^FAILED|^ERROR" "$OUT/fp8tests.txt" | head -30
grep -E "^\[fp8 extend" "$OUT/fp8tests.txt" | head -12
for tag in old new old2; do
  lib="$new_lib"
  [[ "$tag" == old* ]] && lib="$PWD/.carry/var_main.so"
  [[ -f "$lib" ]] || continue
  RADIXKV_PREBUILT_LIB="$lib" run_logged "bench_$tag" "$OUT/fp8_$tag.log" 90 \
    python3 bench/kernels_fp8.py --no-decode
  grep -E "^\[fp8 extend\]|worst" "$OUT/fp8_$tag.log"
done
if [[ "${MORE:-1}" == 1 ]]; then
  run_logged others "$OUT/others.txt" 150 python3 -m pytest -q -p no:cacheprovider \
    tests/test_engine_fp8.py tests/test_kernel_faults_gpu.py tests/test_engine.py tests/test_kernels_gpu.py
  grep -E "^FAILED|^ERROR" "$OUT/others.txt" | head -30
fi
stamp done
