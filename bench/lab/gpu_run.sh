#!/usr/bin/env bash
# The one script a device (GPU machine) call runs: set up FlashInfer, build or load the kernel
# library, run the GPU tests, then the decode benchmark. Logs, JUnit XML, JSON and PNG go to $OUT.
#
# usage (device tool, repository root, carry [".anchors", ".carry", ".whl",
#        "python/radixkv/_core.abi3.so"]):
#   bash bench/lab/gpu_run.sh [tests|bench|all|validate]        (default: all)
#   validate = the GPU tests of RADIXKV_TEST_FILES, then the demo with --device cuda
# env: RADIXKV_TEST_FILES  test files (default tests/test_kernels_gpu.py);
#      RADIXKV_TEST_ARGS  extra pytest args (e.g. "-k decode");  RADIXKV_BENCH_ARGS  extra
#      bench/kernels.py args;  RADIXKV_HEAD_DIMS etc. narrow a JIT build (hip/README.md);
#      RADIXKV_FORCE_PREBUILT=1  use .carry's library even if hip/ changed since it was built;
#      RADIXKV_BENCH_VARIANTS  tuning modes to time (tuning builds; bench/kernels.py).
# Before a call: `bash bench/prebuild.sh` (the kernel library, no device time), and put a Rust
# extension built from the current sources at .carry/_core.abi3.so if python/radixkv's is older
# (`import radixkv` must work there; runs 1 and 4a died on that).
set -uo pipefail
what="${1:-all}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
log="$OUT/gpu_run.log"
exec > >(tee -a "$log") 2>&1
export RADIXKV_VERSION="${RADIXKV_VERSION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
echo "=== radixkv gpu_run ($what) version $RADIXKV_VERSION at $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader || true

# FlashInfer, pytest / rich wheels, the carried Rust extension, build settings (bench/gpu_env.sh),
# then the kernel library: the prebuilt one if it matches hip/ (bench/prebuild.sh), else a JIT build.
# RADIXKV_FORCE_PREBUILT=1 takes the prebuilt library even if hip/ changed since (e.g. another op's
# sources are mid-edit in the working tree that travels).
source bench/gpu_env.sh
use_prebuilt_library
t0=$SECONDS
python3 -c "
from radixkv.ops import loader
loader.load()
print('kernel library ready')
" || { echo "BUILD FAILED"; exit 1; }
echo "library ready in $((SECONDS - t0)) s"

rc=0
if [[ "$what" == all || "$what" == tests || "$what" == validate ]]; then
  echo "=== GPU tests ($(date -u +%H:%M:%S))"
  # shellcheck disable=SC2086
  timeout 300 python3 -m pytest -q -p no:cacheprovider ${RADIXKV_TEST_FILES:-tests/test_kernels_gpu.py} \
    --junitxml="$OUT/pytest_gpu.xml" ${RADIXKV_TEST_ARGS:-} > "$OUT/pytest_gpu.log" 2>&1
  rc=$?
  tail -25 "$OUT/pytest_gpu.log"
  echo "pytest exit $rc"
fi
if [[ "$what" == validate ]]; then
  # The whole pipeline on the GPU: the serving demo with the kernels (bf16), its report as JSON.
  echo "=== demo on cuda ($(date -u +%H:%M:%S))"
  timeout 120 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json" || rc=1
fi
if [[ "$what" == all || "$what" == bench ]]; then
  echo "=== decode benchmark ($(date -u +%H:%M:%S))"
  # shellcheck disable=SC2086
  timeout 420 python3 bench/kernels.py --out "$OUT" --no-extend ${RADIXKV_BENCH_ARGS:-} || rc=1
fi
echo "=== done at $(date -u +%H:%M:%S), rc $rc"
exit $rc
