#!/usr/bin/env bash
# bench/lab/gpu_s19b.sh -- session 19, H200 call 2: the decode plan with MERGE_TOKENS (the Rust core
# of this commit, carried) against fixed cuts (bench/lab/plan_sweep.py), then the decode, FP8,
# fault, plan and engine GPU test files. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19b /tmp/out
# The carried library is 251f349's; hip/ differs from it only in comments since.
export RADIXKV_FORCE_PREBUILT=1
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged sweep "$OUT/sweep.log" 420 python3 bench/lab/plan_sweep.py --out "$OUT"
cat "$OUT/sweep.log"
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 300 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py tests/test_kernel_faults_gpu.py \
  tests/test_engine.py tests/test_engine_fp8.py tests/test_metadata.py
tail -3 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
( cd "$OUT" && tar czf /tmp/s19b.tgz . && rm -rf ./* && mv /tmp/s19b.tgz . )
stamp done
