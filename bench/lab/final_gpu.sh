#!/usr/bin/env bash
# The whole GPU validation in one device call: the GPU tests of every kernel and of the demo
# engine, the demo on cuda, then bench/kernels.py (decode against FlashInfer, then extend against
# FlashInfer fa2/fa3 and SGLang's Triton kernel) on exactly the library the tests ran. The split
# sweeps are left out (recorded in bench/NOTES.md; `bench/kernels.py` without --no-sweep runs them).
# usage (device, repository root, carry [".carry", ".whl", ".anchors"]):  bash bench/lab/final_gpu.sh
# Before: bash bench/prebuild.sh (kernel library, no device time) and a current .carry/_core.abi3.so;
# bash bench/setup_sglang_extend.sh for the SGLang anchor (optional).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export OUT="${OUT:-$repo/bench/results/final}" PYTHONUNBUFFERED=1
export RADIXKV_TEST_FILES="${RADIXKV_TEST_FILES:-tests/test_kernels_gpu.py tests/test_extend_gpu.py tests/test_engine.py}"
bash bench/lab/gpu_run.sh validate
rc=$?
# The same environment and library for the benchmarks (gpu_run.sh ran in its own process).
source bench/gpu_env.sh
use_prebuilt_library
echo "=== benchmarks: decode + extend ($(date -u +%H:%M:%S))"
timeout 480 python3 bench/kernels.py --out "$OUT" --no-sweep 2>&1 | tee -a "$OUT/gpu_run.log" || rc=1
rm -f "$OUT/pytest_gpu.xml"  # at most 8 files come back
echo "=== final_gpu done at $(date -u +%H:%M:%S), rc $rc"
exit $rc
