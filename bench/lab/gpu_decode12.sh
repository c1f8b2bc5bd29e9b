#!/usr/bin/env bash
# bench/lab/gpu_decode12.sh -- issue 12's decode work in one call on one H200 (~8 min):
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
# usage: bash bench/lab/gpu_decode12.sh
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

python3 bench/decode_compare.py "$OUT" | tee "$OUT/compare.txt"
tail -4 "$OUT/new.txt"
stamp "done"
