# bench/gpu_env.sh -- the GPU machine's environment for radixkv's device scripts; source it from
# the repository root (the gpu_*.sh scripts here, bench/lab/gpu_run.sh, bench/lab/final_gpu.sh,
# bench/kernels_fp8.py). Idempotent: a second source in the same call reuses what the first set up.
#   - FlashInfer (unpacked from the benchmark kit into .anchors/; bench/README.md) on PYTHONPATH;
#   - pytest and rich from .whl/ if the image lacks them;
#   - the Rust extension from .carry/_core.abi3.so (a fresher build than the checkout's);
#   - TORCH_CUDA_ARCH_LIST (default 9.0a: the wgmma path of extend needs the arch-specific target),
#     MAX_JOBS, PYTHONUNBUFFERED; NCU_BIN (Nsight Compute's ncu, if installed).
# use_prebuilt_library: take .carry/radixkv_kernels_sm90.so (bench/prebuild.sh) when it was built
# from exactly these hip/ sources (or RADIXKV_FORCE_PREBUILT=1) and loads; else a JIT build.
# gpu_begin / stamp / build_kernels / run_logged: the scripts' shared preamble and steps (below).
_rk_repo="$(pwd)"
if [[ -f .anchors/fi_pkg.tar.xz && ! -d /tmp/fi/flashinfer ]]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .anchors/apache_tvm_ffi-*.whl \
    && mkdir -p /tmp/fi && tar xJf .anchors/fi_pkg.tar.xz -C /tmp/fi \
    || echo "FlashInfer setup failed"
fi
if [[ -d /tmp/fi/flashinfer && ":${PYTHONPATH:-}:" != *":/tmp/fi:"* ]]; then
  export PYTHONPATH="/tmp/fi:/tmp/site:${PYTHONPATH:-}" FLASHINFER_WORKSPACE_BASE=/tmp/fiws
fi
if [[ ":${PYTHONPATH:-}:" != *":$_rk_repo/python:"* ]]; then
  export PYTHONPATH="$_rk_repo/python:${PYTHONPATH:-}"
fi
# pytest / rich (the demo's report) from carried wheels, each into its own target.
_rk_wheels() {  # module target wheel-globs...
  local mod="$1" target="$2"; shift 2
  python3 -c "import $mod" 2>/dev/null && return 0
  ls .whl/"$mod"-*.whl >/dev/null 2>&1 || return 0
  [[ -d "$target" ]] || python3 -m pip install -q --no-index --no-deps --target "$target" "$@"
  [[ ":$PYTHONPATH:" == *":$target:"* ]] || export PYTHONPATH="$PYTHONPATH:$target"
}
_rk_wheels pytest /tmp/pyt .whl/pytest-*.whl .whl/pluggy-*.whl .whl/iniconfig-*.whl .whl/pygments-*.whl
_rk_wheels rich /tmp/rich .whl/rich-*.whl .whl/markdown_it_py-*.whl .whl/mdurl-*.whl .whl/pygments-*.whl
if [[ -f .carry/_core.abi3.so ]]; then cp .carry/_core.abi3.so python/radixkv/_core.abi3.so; fi
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}" MAX_JOBS="${MAX_JOBS:-16}" PYTHONUNBUFFERED=1
NCU_BIN="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
export NCU_BIN

use_prebuilt_library() {
  export RADIXKV_BUILD_DIR="${RADIXKV_BUILD_DIR:-/tmp/radixkv-build}"
  if [[ -f .carry/radixkv_kernels_sm90.so && ( "${RADIXKV_FORCE_PREBUILT:-0}" == 1 || "$(bash bench/hip_hash.sh)" == "$(cat .carry/radixkv_kernels_sm90.hash 2>/dev/null)" ) ]]; then
    export RADIXKV_PREBUILT_LIB="$_rk_repo/.carry/radixkv_kernels_sm90.so"
    if ! python3 -c "import torch; torch.ops.load_library('$RADIXKV_PREBUILT_LIB'); print('prebuilt library loads')"; then
      echo "prebuilt library does not load here; JIT build instead"
      unset RADIXKV_PREBUILT_LIB
    fi
  else
    echo "no prebuilt library matching hip/; JIT build"
  fi
}

# gpu_begin TAG DEFAULT_OUT: OUT (DEFAULT_OUT unless the caller set it) made, stamp's clock started.
gpu_begin() {
  _rk_tag="$1"
  OUT="${OUT:-$2}"
  mkdir -p "$OUT"
  _rk_t0=$SECONDS
}

# stamp MESSAGE...: "[TAG N s] MESSAGE", N the seconds since gpu_begin.
stamp() {
  echo "[${_rk_tag:-gpu} $((SECONDS - ${_rk_t0:-0})) s] $*"
}

# build_kernels LOG [LIMIT_S]: build (JIT, narrowed by the RADIXKV_* variables in force) or load the
# kernel library within LIMIT_S (default 600), its output in LOG; stamps the outcome, prints LOG's
# tail when it failed, and returns the build's status.
build_kernels() {
  local log="$1" limit="${2:-600}" rc
  timeout "$limit" python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
    > "$log" 2>&1
  rc=$?
  stamp "build rc=$rc: $(tail -1 "$log")"
  [[ $rc -eq 0 ]] || tail -40 "$log"
  return $rc
}

# run_logged NAME LOG LIMIT_S CMD...: CMD under `timeout LIMIT_S`, its output in LOG; stamps its
# status and LOG's last line, prints LOG's error lines when it failed, and returns its status.
run_logged() {
  local name="$1" log="$2" limit="$3" rc
  shift 3
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  stamp "$name rc=$rc: $(tail -1 "$log")"
  [[ $rc -eq 0 ]] || grep -E "Error|assert|FAILED" "$log" | head -20
  return $rc
}
