#!/usr/bin/env bash
# CI: build the wheel, install it into a fresh virtual environment, and check, away from the
# checkout, that radixkv works as an installed library: the wheel holds every kernel source; the
# package imports from the venv; a reference op runs on the CPU; the loader finds the sources the
# wheel carries (not the checkout's) and one kernel unit compiles from them; a short demo runs.
#
# usage: bash .ci/wheel_smoke.sh      (from anywhere; after `make setup`; needs hipcc, which
#                                      .ci/run installs for the compile checks)
# env:   PYTHON            the build venv's interpreter (default: .venv/bin/python)
#        RADIXKV_SMOKE_DIR keep the wheel and the venv there (default: a temp dir, removed at exit)
#
# torch: the pinned torch is a 4.9 GB install, so the fresh venv does not install it again. It
# gets one .pth line naming the build venv's site-packages, which puts torch and numpy on its path
# *after* its own site-packages; radixkv itself is installed into the fresh venv from the wheel
# (--ignore-installed: the build venv's editable radixkv is neither used nor touched), and the
# checks below fail if radixkv or its kernel sources resolve anywhere else.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$repo/.venv/bin/python}"
if [[ -n "${RADIXKV_SMOKE_DIR:-}" ]]; then
  work="$RADIXKV_SMOKE_DIR"; rm -rf "$work"; mkdir -p "$work"
else
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fi
t0=$SECONDS
lap() { echo "wheel_smoke: $1 ($((SECONDS - t0)) s)"; }

cd "$repo"
maturin="$(dirname "$py")/maturin"
[[ -x "$maturin" ]] || maturin="$(command -v maturin)"
"$maturin" build --release -q --out "$work/dist"
wheel="$(ls "$work"/dist/radixkv-*.whl)"
lap "built $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"

# Every kernel source of hip/ must be in the wheel under radixkv/_hip, byte for byte.
"$py" - "$wheel" hip <<'PY'
import pathlib, sys, zipfile
wheel, hip = sys.argv[1], pathlib.Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
want = sorted(p for pat in ("*.cu", "*.cuh", "*.h", "*.cpp") for p in hip.glob(pat))
with zipfile.ZipFile(wheel) as z:
    missing = [p.name for p in want if f"radixkv/_hip/{p.name}" not in names]
    differ = [p.name for p in want
              if p.name not in missing and z.read(f"radixkv/_hip/{p.name}") != p.read_bytes()]
if not want or missing or differ:
    sys.exit(f"wheel_smoke: kernel sources: {len(want)} in hip/, missing from the wheel "
             f"{missing}, different {differ}")
print(f"wheel_smoke: the wheel carries all {len(want)} kernel sources of hip/")
PY

# No pip inside the new venv (ensurepip is slow): the build venv's pip installs into it.
"$py" -m venv --without-pip "$work/venv"
vpy="$work/venv/bin/python"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# Every site-packages folder the build interpreter sees (its venv's, and the system's if that venv
# has --system-site-packages), after the new venv's own.
"$py" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
  > "$(purelib "$vpy")/zz_radixkv_smoke_borrowed.pth"
"$py" -m pip --python "$vpy" install -q --no-deps --ignore-installed "$wheel"
lap "installed into a fresh venv"

cd "$work"  # away from the checkout: nothing may come from it
unset RADIXKV_HIP_DIR
"$vpy" - "$work/venv" "$repo" <<'PY'
import pathlib, sys, warnings
venv, repo = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
import radixkv as rk
import torch
from radixkv import ops
from radixkv.ops import loader

def inside(p: pathlib.Path, root: pathlib.Path) -> bool:
    return root in p.resolve().parents

assert inside(pathlib.Path(rk.__file__), venv), f"radixkv imported from {rk.__file__}"
assert inside(pathlib.Path(rk._core.__file__), venv), rk._core.__file__
src = loader.hip_dir()
assert inside(src, venv) and not inside(src, repo), f"kernel sources found at {src}"
units = loader.sources()
assert any(u.endswith("paged_decode.cu") for u in units) and any(u.endswith(".cpp") for u in units)
print(f"wheel_smoke: radixkv {rk.__version__} from the venv; {len(units)} units found in {src}")

# The library part: cache + metadata.
cache = rk.RadixCache(rk.TokenPool(64))
slots = cache.alloc(6)
cache.insert([1, 2, 3, 4, 5, 6], slots)
m = cache.match_prefix([1, 2, 3, 9])
md = rk.build_decode_metadata([m.slots])
assert m.length == 3 and md.seq_lens.tolist() == [3]
cache.check()

# A reference op on the CPU: paged decode against attention written out here.
torch.manual_seed(0)
kc, vc = torch.randn(16, 1, 2, 64), torch.randn(16, 1, 2, 64)
q = torch.randn(1, 4, 64)
idx = torch.tensor([3, 7, 11], dtype=torch.int32)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # "not on a GPU: using the reference ops"
    assert ops.backend(torch.device("cpu")) == "reference"
    out = ops.paged_decode(q, kc, vc, torch.tensor([0, 3], dtype=torch.int32), idx,
                           torch.tensor([3], dtype=torch.int32))
k = kc[idx.long(), 0].repeat_interleave(2, dim=1)  # [3, 4, 64]: KV head h // 2 per query head
v = vc[idx.long(), 0].repeat_interleave(2, dim=1)
p = torch.softmax(torch.einsum("hd,thd->ht", q[0], k) / 8.0, dim=-1)
want = torch.einsum("ht,thd->hd", p, v)
assert torch.allclose(out[0], want, atol=1e-5), (out[0] - want).abs().max()
print("wheel_smoke: cache, metadata and the reference paged_decode work on the CPU")
with open("hip_dir", "w") as f:
    f.write(str(src))
PY
lap "python checks"

# One kernel unit, compiled from the sources the installed package found (no GPU needed).
src="$(cat "$work/hip_dir")"
if ! command -v hipcc >/dev/null; then
  echo "wheel_smoke: hipcc not found (apt-get install hipcc libamdhip64-dev)" >&2
  exit 1
fi
HIP_PLATFORM=amd hipcc -x hip --offload-arch=gfx90a -std=c++17 -O3 -I"$src" \
  -c "$src/store_kv.cu" -o "$work/store_kv.o"
lap "store_kv.cu from the installed sources compiles (hipcc, gfx90a)"

"$work/venv/bin/radixkv" demo --workload chat --layers 1 --seed 1 --quiet --json "$work/demo.json"
"$vpy" - "$work/demo.json" <<'PY'
import json, sys
ver = json.load(open(sys.argv[1]))["verify"]
assert ver["ok"] is True and ver["tokens"] > 0, f"demo verification did not pass: {ver}"
print(f"wheel_smoke: demo: {ver['tokens']} generated tokens of {ver['sequences']} sequences "
      "equal to dense recomputation")
PY
lap "demo ran and verified"
echo "wheel_smoke: OK in $((SECONDS - t0)) s"
