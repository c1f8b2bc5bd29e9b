#!/usr/bin/env bash
# bench/lab/prebuild_variants.sh -- narrow kernel libraries (D = 128, bf16 q, pages 1/16, e4m3 caches;
# sm_90a) of several versions of hip/, built here for an A/B in one device call:
#   bash bench/lab/prebuild_variants.sh v0=main v1=f845d11 v3=WORK
# gives .carry/var_v0.so etc. (WORK: the working tree's hip/; a folder holding hip/ also works). On the device, point
# RADIXKV_PREBUILT_LIB at one of them. The op schema must be the checkout's (same python/).
# FULL=1: every variant instead of the narrow set.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
sp="$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia/cu13"
cuda_home="$(mktemp -d)"
mkdir -p "$cuda_home/lib64" .carry
ln -s "$sp/bin" "$cuda_home/bin"
ln -s "$sp/include" "$cuda_home/include"
for f in "$sp"/lib/*; do ln -s "$f" "$cuda_home/lib64/"; done
ln -sf "$sp/lib/libcudart.so.13" "$cuda_home/lib64/libcudart.so"
for spec in "$@"; do
  name="${spec%%=*}" ref="${spec#*=}"
  src="$(mktemp -d)"
  if [[ "$ref" == WORK ]]; then cp -r hip "$src/hip"; elif [[ -d "$ref/hip" ]]; then cp -r "$ref/hip" "$src/hip"; else git archive "$ref" hip | tar -x -C "$src"; fi
  build="$(mktemp -d)"
  narrow=(RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16 RADIXKV_KV_DTYPES=e4m3)
  [[ "${FULL:-0}" == 1 ]] && narrow=()
  env CUDA_HOME="$cuda_home" TORCH_CUDA_ARCH_LIST=9.0a RADIXKV_BUILD_DIR="$build" MAX_JOBS="${MAX_JOBS:-2}" \
    RADIXKV_HIP_DIR="$src/hip" "${narrow[@]}" python3 - <<'PY'
import importlib.util
spec = importlib.util.spec_from_file_location("loader", "python/radixkv/ops/loader.py")
loader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loader)
loader._build()
PY
  cp "$(ls "$build"/*/*.so | head -1)" ".carry/var_$name.so"
  echo "built .carry/var_$name.so from $ref"
done
