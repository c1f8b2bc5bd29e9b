#!/usr/bin/env bash
# bench/gpu_decode12.sh -- issue 12's decode work in one call on one H200 (~8 min):
#   (a) builds the kernels of this checkout (every variant, for the tests) and, at the same time, a
#       narrow build (D=128, bf16, no FP8) of today's main from .carry/old (`git archive 872372e`
#       unpacked there);
#   (b) runs the decode GPU tests on the new build (matrix-unit and CUDA-core kernels, device
#       checks, FP8 decode);
#   (c) times old and new decode on the uniform and the ragged cells of bench/kernels.py, each run
#       with FlashInfer and the read stream measured in the same process, and prints the old/new
#       comparison per cell.
# Needs the Rust extension of this checkout (python/radixkv/_core.abi3.so or .carry/_core.abi3.so,
# built with `maturin build`/`develop`): the plan is built by radixkv._core.build_decode_plan.
# Output: $OUT/{tests.txt,old,new,compare.txt}.
# usage: bash bench/gpu_decode12.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_decode12 /tmp/out

if ! python3 -c "from radixkv import _core; _core.build_decode_plan([1], 1, slots=1)" 2>/dev/null; then
  echo "radixkv._core lacks build_decode_plan: carry this branch's _core.abi3.so" >&2
  exit 2
fi
if [[ ! -d .carry/old/hip ]]; then
  echo ".carry/old is missing (git archive 872372e | tar -x -C .carry/old)" >&2
  exit 2
fi
# The old package uses this checkout's Rust extension (a superset of the old one's functions).
cp -f python/radixkv/_core.abi3.so .carry/old/python/radixkv/ 2>/dev/null || true

# (a) both builds at once: the old narrow one needs few cores.
( cd .carry/old && PYTHONPATH="$PWD/python:$PYTHONPATH" RADIXKV_BUILD_DIR=/tmp/rkb_old MAX_JOBS=4 \
    RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_KV_DTYPES=none \
    python3 -c "from radixkv.ops import loader; loader.load(); print('old lib ok')" ) \
  > "$OUT/build_old.txt" 2>&1 &
old_pid=$!
RADIXKV_BUILD_DIR=/tmp/rkb_new MAX_JOBS=12 \
  python3 -c "from radixkv.ops import loader; loader.load(); print('new lib ok')" > "$OUT/build_new.txt" 2>&1
stamp "new build: $(tail -1 "$OUT/build_new.txt")"
wait "$old_pid"
stamp "old build: $(tail -1 "$OUT/build_old.txt")"

# (b) decode GPU tests on the new build.
RADIXKV_BUILD_DIR=/tmp/rkb_new timeout 150 python3 -m pytest -q -x -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py \
  tests/test_decode_plan.py > "$OUT/tests.txt" 2>&1
stamp "tests rc=$?: $(tail -1 "$OUT/tests.txt")"

# (c) old, then new, on the same cells (uniform + ragged, page sizes 1 and 16), FlashInfer in each.
args=(--no-extend --no-sweep --no-write-column --ragged --page-sizes 1,16)
bench="$PWD/bench/kernels.py"
( cd .carry/old && PYTHONPATH="$PWD/python:$PYTHONPATH" RADIXKV_BUILD_DIR=/tmp/rkb_old \
    RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_KV_DTYPES=none \
    timeout 150 python3 "$bench" "${args[@]}" --out "$OUT/old" ) > "$OUT/old.txt" 2>&1
stamp "old timed"
RADIXKV_BUILD_DIR=/tmp/rkb_new timeout 150 python3 bench/kernels.py "${args[@]}" --out "$OUT/new" \
  > "$OUT/new.txt" 2>&1
stamp "new timed"
rm -f "$OUT"/*/*.png

python3 - "$OUT" <<'PY' | tee "$OUT/compare.txt"
import json, math, sys
from pathlib import Path

out = Path(sys.argv[1])
def rows(name):
    p = out / name / "paged_decode.json"
    return json.loads(p.read_text())["rows"] if p.exists() else []
key = lambda r: (r["page_size"], r["batch"], r.get("ragged", ""), r["kv_len"])
old = {key(r): r for r in rows("old")}
print("| ps | B | lengths | MB | new µs | old µs | new/old | new vs FI | old vs FI | new of read | work |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
worst, ratios = [], []
for r in rows("new"):
    o = old.get(key(r))
    ratio = r["radixkv_us"] / o["radixkv_us"] if o else float("nan")
    if o:
        ratios.append(ratio)
        worst.append((ratio, key(r)))
    shape = f"ragged {r['ragged']} (mean {r['kv_len']})" if "ragged" in r else f"L={r['kv_len']}"
    f = lambda d, k, fmt="{:.2f}": fmt.format(d[k]) if d and k in d else "-"
    print(f"| {r['page_size']} | {r['batch']} | {shape} | {r['kv_bytes'] / 1e6:.0f} | "
          f"{r['radixkv_us']:.1f} | {f(o, 'radixkv_us', '{:.1f}')} | {ratio:.3f} | "
          f"{f(r, 'vs_flashinfer')} | {f(o, 'vs_flashinfer')} | {r['frac_read']:.2f} | "
          f"{r['num_splits']} |")
    if "read_same_us" in r and r["batch"] == 1 and r["kv_len"] == 32768:
        print(f"|   | B=1 L=32768: new {r['radixkv_us']:.1f} µs vs same-size contiguous read "
              f"{r['read_same_us']:.1f} µs = x{r['radixkv_us'] / r['read_same_us']:.2f} (target <= 1.10) |")
if ratios:
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"new/old time: geomean {gm:.3f} over {len(ratios)} cells; worst {max(worst)[0]:.3f} at {max(worst)[1]}")
rg = [r for r in rows("new") if "ragged" in r and "vs_flashinfer" in r]
if rg:
    print("ragged vs FlashInfer (target >= 1.0): " + ", ".join(
        f"ps{r['page_size']} B={r['batch']} x{r['vs_flashinfer']:.2f}" for r in rg))
PY
tail -4 "$OUT/new.txt"
stamp "done"
