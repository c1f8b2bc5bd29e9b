#!/usr/bin/env bash
# bench/lab/gpu_final9.sh -- session 9's closing H200 call: a full JIT build of this checkout, then
# every GPU test file (kernels, faults, FP8, decode plan, extend, engine, models), then the demo on
# cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_final9 /tmp/out
export RADIXKV_BUILD_DIR=/tmp/rkb_full MAX_JOBS=16
build_kernels "$OUT/build.txt" 240 || exit 1
timeout 270 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py \
  tests/test_fp8_gpu.py tests/test_decode_plan.py tests/test_extend_gpu.py tests/test_engine.py \
  tests/test_engine_fp8.py tests/test_models_gpu.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "GPU tests rc=$?: $(tail -1 "$OUT/pytest_gpu.txt")"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
timeout 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json" > "$OUT/demo.txt" 2>&1
stamp "demo rc=$?"; tail -5 "$OUT/demo.txt"
stamp done
