#!/usr/bin/env bash
# bench/lab/gpu_s22h.sh -- session 22, eighth H200 call: every GPU test file on the full library of
# the final hip/ (sm_count() cached in platform.h for both launchers; every kernel's SASS as in call 5).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22h /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
stamp done
