#!/usr/bin/env bash
# bench/lab/gpu_ext17b.sh -- one H200 call (session 17): FP8 extend variants as narrow libraries
# (bench/lab/prebuild_variants.sh; .carry/var_NAME.so), each timed by bench/kernels_fp8.py
# --no-decode in the order of ORDER (default: main v1 v2 v3 v1 main), then the FP8 extend tests on
# TEST_LIB's library (cases the narrow build lacks fail as "unsupported").
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext17b /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
i=0
for tag in ${ORDER:-main v1 v2 v3 v1 main}; do
  i=$((i + 1))
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "bench_$tag" "$OUT/fp8_${i}_$tag.log" 90 \
    python3 bench/kernels_fp8.py --no-decode
done
tlib="${TEST_LIB:-v1}"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tlib.so" run_logged "tests_$tlib" "$OUT/tests_$tlib.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_fp8_gpu.py -k "extend and not short_context"
grep -E "^FAILED" "$OUT/tests_$tlib.txt" | grep -v unsupported | head -20
grep -c "unsupported" "$OUT/tests_$tlib.txt"
stamp done
