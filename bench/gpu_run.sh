#!/usr/bin/env bash
# The one script a device (GPU machine) call runs: set up FlashInfer, build or load the kernel
# library, run the GPU tests, then the decode benchmark. Logs, JUnit XML, JSON and PNG go to $OUT.
#
# usage (device tool, repository root, carry [".anchors", ".carry", ".whl",
#        "python/radixkv/_core.abi3.so"]):
#   bash bench/gpu_run.sh [tests|bench|all|validate]        (default: all)
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
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
log="$OUT/gpu_run.log"
exec > >(tee -a "$log") 2>&1
export PYTHONUNBUFFERED=1 RADIXKV_VERSION="${RADIXKV_VERSION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
echo "=== radixkv gpu_run ($what) version $RADIXKV_VERSION at $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader || true

# FlashInfer anchor (../shared/anchors/README.md), if carried.
if [[ -f .anchors/fi_pkg.tar.xz ]]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .anchors/apache_tvm_ffi-*.whl \
    && mkdir -p /tmp/fi && tar xJf .anchors/fi_pkg.tar.xz -C /tmp/fi \
    && export FLASHINFER_WORKSPACE_BASE=/tmp/fiws && fi_path="/tmp/fi:/tmp/site:" \
    || echo "FlashInfer setup failed"
fi
export PYTHONPATH="${fi_path:-}$repo/python:${PYTHONPATH:-}"
# pytest, if the image lacks it (wheels carried in .whl/).
if ! python3 -c "import pytest" 2>/dev/null && ls .whl/pytest-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyt .whl/pytest-*.whl \
    .whl/pluggy-*.whl .whl/iniconfig-*.whl .whl/pygments-*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/pyt"
fi
# rich, for the demo's progress bar and report (also carried in .whl/).
if ! python3 -c "import rich" 2>/dev/null && ls .whl/rich-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/rich .whl/rich-*.whl \
    .whl/markdown_it_py-*.whl .whl/mdurl-*.whl .whl/pygments-*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/rich"
fi

# The Rust extension, if a fresher one than the checkout's was carried (.carry/_core.abi3.so).
if [[ -f .carry/_core.abi3.so ]]; then cp .carry/_core.abi3.so python/radixkv/_core.abi3.so; fi
# A tuning build (alternative decode kernels) when the prebuilt library was made as one.
if [[ "$(cat .carry/radixkv_kernels_sm90.variants 2>/dev/null)" == 1 ]]; then export RADIXKV_DECODE_VARIANTS=1; fi

# Kernel library: the prebuilt one if it matches hip/ (bench/prebuild.sh), else a JIT build here.
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}" MAX_JOBS="${MAX_JOBS:-16}"
export RADIXKV_BUILD_DIR=/tmp/radixkv-build
# RADIXKV_FORCE_PREBUILT=1 takes the prebuilt library even if hip/ changed since (e.g. another
# op's sources are mid-edit in the working tree that travels). LC_ALL=C: hip_hash.sh sorts file
# names, and the device's locale collates "paged_decode.cu" / "paged_decode_d128.cu" differently
# from the C.UTF-8 of the machine that prebuilt (decode run s2-1 JIT-built for that reason).
if [[ -f .carry/radixkv_kernels_sm90.so && ( "${RADIXKV_FORCE_PREBUILT:-0}" == 1 || "$(LC_ALL=C bash bench/hip_hash.sh)" == "$(cat .carry/radixkv_kernels_sm90.hash 2>/dev/null)" ) ]]; then
  export RADIXKV_PREBUILT_LIB="$repo/.carry/radixkv_kernels_sm90.so"
  if ! python3 -c "import torch; torch.ops.load_library('$RADIXKV_PREBUILT_LIB'); print('prebuilt library loads')"; then
    echo "prebuilt library does not load here; JIT build instead"
    unset RADIXKV_PREBUILT_LIB
  fi
else
  echo "no prebuilt library matching hip/; JIT build"
fi
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
