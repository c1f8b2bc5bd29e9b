#!/usr/bin/env bash
# bench/lab/gpu_final10.sh -- session 10's closing H200 call: the library prebuilt here (bench/prebuild.sh; a JIT build when it does not match), then
# every GPU test file (kernels, faults, FP8, decode plan, extend, engine, models, engine scale, CLI), then the demo on
# cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_final10 /tmp/out
export RADIXKV_BUILD_DIR=/tmp/rkb_full MAX_JOBS=16
use_prebuilt_library
build_kernels "$OUT/build.txt" 240 || exit 1
timeout 270 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py \
  tests/test_fp8_gpu.py tests/test_decode_plan.py tests/test_extend_gpu.py tests/test_engine.py \
  tests/test_engine_fp8.py tests/test_models_gpu.py tests/test_engine_scale.py tests/test_cli.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "GPU tests rc=$?: $(tail -1 "$OUT/pytest_gpu.txt")"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
timeout 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json" > "$OUT/demo.txt" 2>&1
stamp "demo rc=$?"; tail -5 "$OUT/demo.txt"
stamp done
