#!/usr/bin/env bash
# bench/lab/gpu_ext16c.sh -- one H200 call (session 16): the full library of bench/prebuild.sh with
# extend plans: GPU tests (TESTS), the ragged batches with and without the plan against FlashInfer
# (bench/kernels_extend.py --ragged), the uniform grid, the demo on cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext16c /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
read -r -a tests <<< "${TESTS:-tests/test_extend_gpu.py tests/test_fp8_gpu.py tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_engine.py tests/test_decode_plan.py}"
run_logged tests "$OUT/tests.txt" 330 python3 -m pytest -q -p no:cacheprovider "${tests[@]}"
grep -E "^FAILED|^ERROR" "$OUT/tests.txt" | head -30
run_logged ragged "$OUT/ragged.log" 150 python3 bench/kernels_extend.py --ragged --out "$OUT"
grep -E "^\[ragged" "$OUT/ragged.log"
if [[ "${GRID:-1}" == 1 ]]; then
  run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT"
  grep -E "^\| " "$OUT/extend.log" | tail -19
fi
# The product's plan rule on the uniform cells (where the builder now returns no plan), each
# order timed 4 times, rotated: does a plan help or hurt them?
RADIXKV_PREBUILT_LIB="$RADIXKV_PREBUILT_LIB" run_logged uniform "$OUT/uniform.log" 200 \
  python3 bench/lab/ext16_plan_ab.py --uniform --orders hyb,req --rounds 4 --kernels bound --tag " uniform"
grep -E "^\[|MISMATCH" "$OUT/uniform.log"
stamp done
