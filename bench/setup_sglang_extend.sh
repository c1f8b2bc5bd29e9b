#!/usr/bin/env bash
# Bundle SGLang's Triton extend-attention kernel (sglang 0.5.23, Apache-2.0) as a benchmark anchor
# for the GPU machine, which has torch and triton but not SGLang's other dependencies.
#
# The three kernel modules the function needs are taken unchanged from the sglang wheel; the two
# SGLang modules they import for platform queries (sglang.srt.utils, sglang.srt.environ) pull in
# the whole server, so they are replaced by small stand-ins written here that answer as SGLang
# would on an NVIDIA GPU (no ROCm paths, every SGLANG_* switch at its default). Nothing of this
# enters radixkv's sources: the bundle lands in .anchors/sglang_triton (git-ignored, carried to
# the GPU machine) and bench/kernels_extend.py (load_sglang_extend) imports it from there.
#
# usage: bash bench/setup_sglang_extend.sh   (needs pip and network here, no GPU)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo/.anchors/sglang_triton"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" sglang==0.5.23
whl="$(ls "$tmp"/sglang-0.5.23-*.whl)"
rm -rf "$dest"
mkdir -p "$dest"
(cd "$dest" && python3 -m zipfile -e "$whl" "$tmp/x" >/dev/null)
src="$tmp/x/sglang/kernels/ops/attention"
pkg="$dest/sglang"
mkdir -p "$pkg/kernels/ops/attention" "$pkg/srt"
for f in extend_attention.py decode_attention.py score_mod.py; do cp "$src/$f" "$pkg/kernels/ops/attention/$f"; done
cp "$tmp/x/sglang-0.5.23.dist-info/licenses/LICENSE" "$dest/LICENSE" 2>/dev/null \
  || cp "$(ls -d "$tmp"/x/sglang-*.dist-info)"/LICENSE* "$dest/" 2>/dev/null || true
for d in "" kernels kernels/ops kernels/ops/attention srt; do : > "$pkg/$d/__init__.py"; done
cat > "$pkg/srt/utils.py" <<'PY'
"""Stand-in for sglang.srt.utils: the platform queries the Triton attention kernels make."""
import torch


def is_cuda():
    return torch.version.cuda is not None and torch.cuda.is_available()


def is_hip():
    return torch.version.hip is not None


def is_gfx95_supported():
    return False


def is_gfx1250_supported():
    return False


def get_device_core_count(device_id: int = 0) -> int:
    return torch.cuda.get_device_properties(device_id).multi_processor_count if is_cuda() else 0
PY
cat > "$pkg/srt/environ.py" <<'PY'
"""Stand-in for sglang.srt.environ: the SGLANG_* switches the kernels read, at sglang 0.5.23's
defaults (the two True ones only matter on ROCm gfx95x)."""


class _Default:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _Envs:
    SGLANG_FORCE_LEAN_GRID_CU_MULT = _Default(1.0)
    SGLANG_TRITON_COMPACT_EXTEND_ATTENTION = _Default(True)
    SGLANG_TRITON_FP8_PREFILL_ATTN = _Default(True)

    def __getattr__(self, name):  # the other switches the kernels read default to off
        return _Default(False)


envs = _Envs()
PY
echo "SGLang Triton extend anchor in $dest: $(ls "$pkg/kernels/ops/attention")"
