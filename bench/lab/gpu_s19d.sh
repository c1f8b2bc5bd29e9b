#!/usr/bin/env bash
# bench/lab/gpu_s19d.sh -- session 19, H200 call 5, on the full library prebuilt here from the
# final hip/ (FP8 decode's scales loaded first) and the final core (the plan's MERGE_TOKENS): every
# GPU test file, FP8 decode with FlashInfer (bench/kernels_fp8.py --no-extend), the demo on cuda.
# One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19d /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
run_logged fp8 "$OUT/fp8.log" 120 python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8"
grep -E "geomean" "$OUT/fp8.log" | head -2
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt"
( cd "$OUT" && tar czf /tmp/s19d.tgz . && rm -rf ./* && mv /tmp/s19d.tgz . )
stamp done
