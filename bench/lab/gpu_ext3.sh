#!/usr/bin/env bash
# bench/lab/gpu_ext3.sh -- issue 12 item 2 (warp-specialised extend on sm_90a, hip/extend_ws.cuh) on
# one H200 in one call (~5 min), from the repository root:
#   1. JIT builds of this branch's hip/ (16-bit caches only; D 64/128/256 so the whole extend test
#      file runs) and, if .carry/base/hip exists, of main's kernels (narrow: D=128, bf16, page
#      sizes 1 and 16), side by side, each in its own RADIXKV_BUILD_DIR;
#   2. tests/test_extend_gpu.py on this branch (stops at the first failure and prints it);
#   3. bench/kernels_extend.py on the 18 cells: this branch with FlashInfer fa2/fa3 and --check,
#      main's build in a separate process (no anchors); then one table
#      (cell, new µs, main µs, fa3 µs, fa2 µs, x fa3, x fa2, x main, matmul fraction; "x Y" is
#      Y's time / the new kernel's time: > 1 means the new kernel is faster).
# Output under $OUT: build_*.txt, extend_tests.log, new/ and main/ (extend_attention.json),
# bench_*.log, ext3_table.md.
#   EXT3_CELLS="1:4096:2048,16:4096:2048"  a --cells subset (default: all 18)
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
source bench/gpu_env.sh
export TORCH_CUDA_ARCH_LIST=9.0a
t0=$SECONDS
stamp() { echo "[ext3 $((SECONDS - t0)) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv,noheader || true

new=(RADIXKV_KV_DTYPES=none RADIXKV_BUILD_DIR=/tmp/rkb_ext3 RADIXKV_HIP_DIR="$PWD/hip")
base=(RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16 RADIXKV_KV_DTYPES=none
      RADIXKV_BUILD_DIR=/tmp/rkb_base RADIXKV_HIP_DIR="$PWD/.carry/base/hip")
have_base=0
[[ -d .carry/base/hip ]] && have_base=1
env "${new[@]}" MAX_JOBS=10 python3 -c "from radixkv.ops import loader; loader.load(); print('new build ok')" \
  > "$OUT/build_new.txt" 2>&1 &
pid_new=$!
if [[ $have_base == 1 ]]; then
  env "${base[@]}" MAX_JOBS=6 python3 -c "from radixkv.ops import loader; loader.load(); print('main build ok')" \
    > "$OUT/build_main.txt" 2>&1 &
  pid_base=$!
fi
wait $pid_new
rc_new=$?
stamp "new build rc=$rc_new: $(tail -1 "$OUT/build_new.txt")"
if [[ $rc_new -ne 0 ]]; then
  grep -E "error|ptxas" "$OUT/build_new.txt" | head -40
fi

rc=0
if [[ $rc_new -eq 0 ]]; then
  env "${new[@]}" timeout 150 python3 -m pytest tests/test_extend_gpu.py -x -q -p no:cacheprovider \
    > "$OUT/extend_tests.log" 2>&1
  rc=$?
  stamp "tests rc=$rc: $(tail -1 "$OUT/extend_tests.log")"
  if [[ $rc -ne 0 ]]; then
    grep -E "^(E |FAILED|ERROR)|Error|error" "$OUT/extend_tests.log" | head -40
  fi
fi
if [[ $have_base == 1 ]]; then
  wait $pid_base
  stamp "main build rc=$?: $(tail -1 "$OUT/build_main.txt")"
fi

cells=()
[[ -n "${EXT3_CELLS:-}" ]] && cells=(--cells "$EXT3_CELLS")
if [[ $rc -ne 0 ]]; then
  cells=(--cells "${EXT3_CELLS:-16:4096:2048,1:1024:512}")  # a tiny timing after a failure
fi
if [[ $rc_new -eq 0 && $rc -ne 124 ]]; then  # 124: the tests hung (no timing then)
  env "${new[@]}" timeout 150 python3 bench/kernels_extend.py --check --reps 20 --sglang-src "" --out "$OUT/new" "${cells[@]}" \
    > "$OUT/bench_new.log" 2>&1
  stamp "bench new rc=$?"
  tail -3 "$OUT/bench_new.log"
fi
if [[ $have_base == 1 ]]; then
  env "${base[@]}" timeout 80 python3 bench/kernels_extend.py --no-anchors --reps 20 --out "$OUT/main" "${cells[@]}" \
    > "$OUT/bench_main.log" 2>&1
  stamp "bench main rc=$?"
fi

python3 - "$OUT" <<'PY' | tee "$OUT/ext3_table.md"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def rows(name):
    f = out / name / "extend_attention.json"
    if not f.is_file():
        return {}
    return {(r["page_size"], r["prefix"], r["extend"]): r for r in json.loads(f.read_text())["rows"]}
new, main = rows("new"), rows("main")
print("| ps | P | E | new µs | main µs | fa3 µs | fa2 µs | x fa3 | x fa2 | x main | of matmul | err vs ref |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k, r in new.items():
    m = main.get(k, {})
    g = lambda d, key, fmt: format(d[key], fmt) if key in d else "-"
    vs_main = format(m["radixkv_us"] / r["radixkv_us"], ".2f") if "radixkv_us" in m else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {r['radixkv_us']:.1f} | {g(m, 'radixkv_us', '.1f')} | "
          f"{g(r, 'fa3_us', '.1f')} | {g(r, 'fa2_us', '.1f')} | {g(r, 'vs_fa3', '.2f')} | "
          f"{g(r, 'vs_fa2', '.2f')} | {vs_main} | {r['frac_matmul']:.2f} | {g(r, 'rel_err_vs_ref', '.1e')} |")
PY
stamp "done (tests rc=$rc)"
exit $rc
