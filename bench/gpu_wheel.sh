#!/usr/bin/env bash
# The installed wheel builds and runs its kernels on a GPU, with no checkout in sight: install the
# wheel into a fresh venv (system torch visible), leave the repository, and let radixkv.ops build
# the kernels from the sources the wheel carries (a narrow variant set, into a fresh build
# folder), then check store_kv, paged_decode and extend_attention against the reference ops.
#
# usage (repository root):
#   here (has Rust):  make wheel && mkdir -p .carry/wheels && cp dist/radixkv-*.whl .carry/wheels/
#   GPU machine:      bash bench/gpu_wheel.sh          (carry .carry; about a minute)
# env: RADIXKV_WHEEL  the wheel (default: the newest .carry/wheels/radixkv-*.whl)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheel="${RADIXKV_WHEEL:-$(ls -t "$repo"/.carry/wheels/radixkv-*.whl 2>/dev/null | head -1)}"
[[ -f "$wheel" ]] || { echo "gpu_wheel: no wheel (see usage)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
t0=$SECONDS

python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps --no-index --ignore-installed "$wheel"
echo "gpu_wheel: installed $(basename "$wheel") ($((SECONDS - t0)) s)"
cd "$work"
unset RADIXKV_HIP_DIR RADIXKV_PREBUILT_LIB
export RADIXKV_BUILD_DIR="$work/build" RADIXKV_OPS_BACKEND=extension
export RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}"
"$work/venv/bin/python" - "$work/venv" "$repo" <<'PY'
import pathlib, sys, time
import torch
import radixkv as rk
from radixkv import ops
from radixkv.ops import loader, reference as R

venv, repo = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
src = loader.hip_dir().resolve()
assert venv in pathlib.Path(rk.__file__).resolve().parents, rk.__file__
assert venv in src.parents and repo not in src.parents, src
if not torch.cuda.is_available():
    sys.exit("gpu_wheel: the wheel installs and finds its sources; no GPU here to build on")
t = time.perf_counter()
loader.load()
print(f"gpu_wheel: kernels built from {src} in {time.perf_counter() - t:.1f} s")

torch.manual_seed(0)
dev, dt = torch.device("cuda"), torch.bfloat16
pages, ps, hkv, hq, d = 64, 16, 8, 32, 128
kc = torch.zeros(pages, ps, hkv, d, device=dev, dtype=dt)
vc = torch.zeros_like(kc)
lens = [37, 200, 1]
md = rk.build_decode_metadata([list(range(10, 10 + -(-n // ps))) for n in lens], lens, ps)
m = md.to(dev)
# Every request reads pages 10, 11, ... (shared prefixes); write the longest one's tokens there.
slots = torch.arange(10 * ps, 10 * ps + max(lens), dtype=torch.int32, device=dev)
k = torch.randn(slots.numel(), hkv, d, device=dev, dtype=dt)
ops.store_kv(kc, vc, k, k.flip(0), slots)
kr, vr = kc.clone(), vc.clone()
R.store_kv(kr, vr, k, k.flip(0), slots)
assert torch.equal(kc, kr) and torch.equal(vc, vr), "store_kv differs from the reference"
q = torch.randn(len(lens), hq, d, device=dev, dtype=dt)
out = ops.paged_decode(q, kc, vc, m.kv_indptr, m.kv_indices, m.seq_lens)
ref = R.paged_decode(q.float(), kc.float(), vc.float(), m.kv_indptr, m.kv_indices, m.seq_lens)
err = (out.float() - ref).abs().max().item()
assert err < 2e-2, f"paged_decode max error {err}"
ext = rk.build_paged_extend_metadata(
    [list(range(10, 10 + -(-n // ps))) for n in lens], lens, [5, 17, 1], ps).to(dev)
qe = torch.randn(ext.num_tokens, hq, d, device=dev, dtype=dt)
oe = ops.extend_attention(qe, kc, vc, ext.qo_indptr, ext.kv_indptr, ext.kv_indices, ext.seq_lens)
re = R.extend_attention(qe.float(), kc.float(), vc.float(), ext.qo_indptr, ext.kv_indptr,
                        ext.kv_indices, ext.seq_lens)
err_e = (oe.float() - re).abs().max().item()
assert err_e < 2e-2, f"extend_attention max error {err_e}"
print(f"gpu_wheel: store_kv exact; paged_decode max |err| {err:.1e}; extend {err_e:.1e} (bf16)")
PY
echo "gpu_wheel: OK in $((SECONDS - t0)) s"
