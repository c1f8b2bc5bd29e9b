#!/usr/bin/env bash
# One device call for the fp8misc changes: a narrow JIT build of the kernel library (head dims 64 and
# 128, bf16, page sizes 1 and 16, both FP8 cache types), then the GPU tests they touch:
#   - tests/test_kernel_faults_gpu.py  (bad plan then good plan: merge counters back to zero, both
#     decode kernels; FP8 scale values recorded per op; the existing fault cases)
#   - tests/test_fp8_gpu.py            (FP8 accuracy, graph replay, bad-scale errors + recorded faults)
#   - tests/test_kernels_gpu.py -k "split or counters or plan or graph or ragged or bad or cuda_core or opcheck"
#     (the fused merge and its counters on good plans)
# Logs and JUnit XML go to $OUT. Expected: under 4 minutes on one H200 (most of it the build).
#
# usage (device tool, repository root; carry [".whl", ".carry", "python/radixkv/_core.abi3.so"]
# as for bench/lab/gpu_run.sh, so pytest and a current Rust extension are there):
#   bash bench/lab/gpu_fp8misc.sh
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/fp8misc}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_fp8misc.log") 2>&1
echo "=== gpu_fp8misc at $(date -u +%H:%M:%S), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

source bench/gpu_env.sh
export RADIXKV_HEAD_DIMS=64,128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16 RADIXKV_KV_DTYPES=e4m3,e5m2
export RADIXKV_BUILD_DIR="${RADIXKV_BUILD_DIR:-/tmp/radixkv-build-fp8misc}"
unset RADIXKV_PREBUILT_LIB  # hip/ changed: build these sources
python3 -c "import radixkv._core" || { echo "radixkv._core does not import (carry python/radixkv/_core.abi3.so)"; exit 1; }
t0=$SECONDS
python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
  || { echo "BUILD FAILED"; exit 1; }
echo "build: $((SECONDS - t0)) s"

rc=0
run() {  # name, pytest args...
  local name="$1"; shift
  local t=$SECONDS
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/$name.xml" "$@" \
    > "$OUT/$name.log" 2>&1
  local r=$?
  echo "--- $name: rc=$r in $((SECONDS - t)) s"
  tail -15 "$OUT/$name.log"
  [[ $r -eq 0 ]] || rc=1
}
run faults tests/test_kernel_faults_gpu.py -k cuda
run fp8 tests/test_fp8_gpu.py
run decode tests/test_kernels_gpu.py -k "split or counters or plan or graph or ragged or bad or cuda_core or opcheck"
echo "=== done rc=$rc at $(date -u +%H:%M:%S)"
exit $rc
