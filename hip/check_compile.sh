#!/usr/bin/env bash
# Compile every kernel translation unit (hip/*.cu; torch-free by rule) for AMD gfx906 and gfx90a
# with hipcc, and for NVIDIA sm_90 with nvcc from PyPI; then compile them for gfx906, gfx90a, gfx942
# and gfx1100 down to ISA with Debian's clang-19 and print what each kernel costs
# (hip/isa_report.py), failing on any spill to scratch on gfx906 / gfx90a / gfx942. No GPU and no
# torch build needed.
#
# usage: bash hip/check_compile.sh          (from any directory; uses the active Python venv)
# env:   RADIXKV_CHECK_TARGETS  space-separated subset of "gfx906 gfx90a sm_90 sm_90a" (default: all;
#                               sm_90a is Hopper's arch-specific target: the wgmma path of extend)
#        RADIXKV_CHECK_JOBS     parallel compiles (default: nproc)
#        RADIXKV_ISA            0: skip the ISA report (default 1: needs clang++-19, apt clang-19 lld-19)
#        RADIXKV_ISA_TARGETS    comma-separated ISA report targets (default gfx906,gfx90a,gfx942,gfx1100)
# Needs: hipcc + libamdhip64-dev (apt), and pip for nvidia-cuda-nvcc/crt/cccl/nvvm 13.0, which the
# script installs into the active environment when nvcc is missing. Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
targets="${RADIXKV_CHECK_TARGETS:-gfx906 gfx90a sm_90 sm_90a}"
jobs="${RADIXKV_CHECK_JOBS:-$(nproc)}"
py="${PYTHON:-python3}"
outdir="$(mktemp -d)"
trap 'rm -rf "$outdir"' EXIT

mapfile -t units < <(cd "$here" && ls -1 *.cu)
if [[ ${#units[@]} -eq 0 ]]; then echo "check_compile: no *.cu under $here" >&2; exit 1; fi
# Kernel units must not include torch (only the *.cpp binding units may).
if grep -l -E '#include *[<"](torch|ATen|c10)/' "${units[@]/#/$here/}" >/dev/null 2>&1; then
  echo "check_compile: a kernel unit includes torch headers:" >&2
  grep -l -E '#include *[<"](torch|ATen|c10)/' "${units[@]/#/$here/}" >&2
  exit 1
fi

find_nvcc() {
  "$py" - <<'PY' 2>/dev/null
import pathlib, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    p = pathlib.Path(d) / "nvidia" / "cu13" / "bin" / "nvcc"
    if p.is_file():
        print(p); sys.exit(0)
sys.exit(1)
PY
}

nvcc=""
if [[ " $targets " == *" sm_"* ]]; then
  if ! nvcc="$(find_nvcc)"; then
    echo "check_compile: installing nvcc 13.0 from PyPI into $("$py" -c 'import sys; print(sys.prefix)')"
    # nvvm is pinned too: an unpinned one (13.5+) emits PTX that ptxas 13.0 rejects.
    "$py" -m pip install -q "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" \
      "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-runtime==13.0.*"
    nvcc="$(find_nvcc)" || { echo "check_compile: nvcc not found after pip install" >&2; exit 1; }
  fi
fi
if [[ " $targets " == *" gfx"* ]] && ! command -v hipcc >/dev/null; then
  echo "check_compile: hipcc not found (apt-get install hipcc libamdhip64-dev)" >&2
  exit 1
fi

compile() {  # target unit
  local t="$1" u="$2" log="$outdir/$1.$2.log"
  local start=$SECONDS
  if [[ "$t" == gfx* ]]; then
    HIP_PLATFORM=amd hipcc -x hip --offload-arch="$t" -std=c++17 -O3 -Werror=return-type \
      -I"$here" -c "$here/$u" -o "$outdir/$t.$u.o" >"$log" 2>&1
  else
    local arch="${t#sm_}"
    "$nvcc" -std=c++17 -O3 -gencode "arch=compute_$arch,code=sm_$arch" -I"$here" \
      -c "$here/$u" -o "$outdir/$t.$u.o" >"$log" 2>&1
  fi
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL  $t  $u"
    sed 's/^/    /' "$log" | head -40
    return 1
  fi
  echo "ok    $t  $u  ($((SECONDS - start)) s)"
}
export -f compile
export here outdir nvcc

echo "check_compile: ${#units[@]} units x targets [$targets], $jobs jobs"
failed=0
for t in $targets; do for u in "${units[@]}"; do echo "$t $u"; done; done |
  xargs -P "$jobs" -n 2 bash -c 'compile "$0" "$1"' || failed=1
if [[ $failed -ne 0 ]]; then
  echo "check_compile: FAILED" >&2
  exit 1
fi
echo "check_compile: all units compile for [$targets]"

if [[ "${RADIXKV_ISA:-1}" != 0 ]]; then
  if ! command -v clang++-19 >/dev/null; then
    echo "check_compile: clang++-19 not found for the ISA report (apt-get install clang-19 lld-19;" \
      "RADIXKV_ISA=0 skips it)" >&2
    exit 1
  fi
  echo "check_compile: ISA report (clang-19)"
  "$py" "$here/isa_report.py" --jobs "$jobs"
fi
