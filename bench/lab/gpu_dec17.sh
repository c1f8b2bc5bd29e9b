#!/usr/bin/env bash
# bench/lab/gpu_dec17.sh -- one H200 call (session 17): FP8 decode with S^T = K Q^T as FP8 products
# (mma m16n8k32, the cache bytes as the A operand; q split per head into two e4m3 terms), as a
# narrow library (.carry/var_dn.so) against main's (.carry/var_main.so): the FP8 decode GPU tests on
# the variant (cases the narrow build lacks fail as "unsupported"), then bench/kernels_fp8.py
# --no-extend on both in the order of ORDER.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_dec17 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
tlib="${TEST_LIB:-dn}"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tlib.so" run_logged "tests_$tlib" "$OUT/tests_$tlib.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider -s tests/test_fp8_gpu.py tests/test_kernels_gpu.py -k "decode and not extend"
grep -E "^FAILED" "$OUT/tests_$tlib.txt" | grep -v unsupported | head -20
grep -E "^\[fp8 decode" "$OUT/tests_$tlib.txt" | head -8
i=0
for tag in ${ORDER:-main dn dn main}; do
  i=$((i + 1))
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "bench_$tag" "$OUT/dec_${i}_$tag.log" 120 \
    python3 bench/kernels_fp8.py --no-extend
  grep -E "geomean" "$OUT/dec_${i}_$tag.log"
done
stamp done
