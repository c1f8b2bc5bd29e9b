#!/usr/bin/env bash
# Build the kernel library here (no GPU needed) for sm_90 with every variant, and put it with a hash
# of hip/ in .carry/ (git-ignored) so a device run can load it instead of spending device time on
# the JIT build. bench/gpu_env.sh's use_prebuilt_library falls back to the JIT build when the hash
# no longer matches.
# Needs nvcc from PyPI (hip/check_compile.sh installs it) and a CUDA_HOME layout around it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
sp="$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia/cu13"
cuda_home="$(mktemp -d)"
mkdir -p "$cuda_home/lib64"
ln -s "$sp/bin" "$cuda_home/bin"
ln -s "$sp/include" "$cuda_home/include"
for f in "$sp"/lib/*; do ln -s "$f" "$cuda_home/lib64/"; done
ln -sf "$sp/lib/libcudart.so.13" "$cuda_home/lib64/libcudart.so"
build="$(mktemp -d)"
hash="$(bash bench/hip_hash.sh)"  # of the sources the build starts from
CUDA_HOME="$cuda_home" TORCH_CUDA_ARCH_LIST=9.0a RADIXKV_BUILD_DIR="$build" MAX_JOBS="${MAX_JOBS:-2}" \
  python3 - <<'PY'
# loader.py needs only torch: load it by path so a stale radixkv._core cannot stop the build.
import importlib.util
spec = importlib.util.spec_from_file_location("loader", "python/radixkv/ops/loader.py")
loader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loader)
loader._build()
PY
mkdir -p .carry
cp "$(ls "$build"/*/*.so | head -1)" .carry/radixkv_kernels_sm90.so
echo "$hash" > .carry/radixkv_kernels_sm90.hash
echo "prebuilt .carry/radixkv_kernels_sm90.so for hip/ $(cat .carry/radixkv_kernels_sm90.hash)"
