#!/usr/bin/env bash
# bench/lab/gpu_dec9.sh -- one H200 call for a decode kernel change against .carry/base (a git
# archive of main before it: hip/ python/ bench/): (a) a full build of this checkout and a narrow
# one of base (D=128, bf16, pages 1/16, e4m3); (b) the decode GPU tests; (c) bench/kernels.py
# decode (uniform + ragged, FlashInfer in each run), base then new, compared per cell
# (bench/decode_compare.py); (d) bench/kernels_fp8.py decode, new (FlashInfer) and base, and
# then the FP8 extend tests and bench/kernels_fp8.py --no-decode (FP8 extend vs bf16).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_dec9 /tmp/out
basepp="$PWD/.carry/base/python:${PYTHONPATH//$_rk_repo\/python:/}"
( cd .carry/base && PYTHONPATH="$basepp" RADIXKV_BUILD_DIR=/tmp/rkb_base MAX_JOBS=4 \
    RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16 RADIXKV_KV_DTYPES=e4m3 \
    python3 -c "from radixkv.ops import loader; loader.load(); print('base lib ok')" ) \
  > "$OUT/build_base.txt" 2>&1 &
bpid=$!
export RADIXKV_BUILD_DIR=/tmp/rkb_new MAX_JOBS=12
build_kernels "$OUT/build_new.txt" 400 || exit 1
wait $bpid; stamp "base build: $(tail -1 "$OUT/build_base.txt")"

timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_gpu.py \
  tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py > "$OUT/tests.txt" 2>&1
stamp "tests rc=$?: $(tail -1 "$OUT/tests.txt")"; grep -E "^FAILED|^ERROR|Error" "$OUT/tests.txt" | head -10

args=(--no-extend --no-sweep --no-write-column --ragged --page-sizes 1,16)
bench="$PWD/bench/kernels.py"
( cd .carry/base && PYTHONPATH="$basepp" RADIXKV_BUILD_DIR=/tmp/rkb_base \
    timeout 150 python3 "$bench" "${args[@]}" --out "$OUT/old" ) > "$OUT/old.txt" 2>&1
stamp "base decode timed rc=$?"
timeout 150 python3 bench/kernels.py "${args[@]}" --out "$OUT/new" > "$OUT/new.txt" 2>&1
stamp "new decode timed rc=$?"
rm -f "$OUT"/*/*.png
python3 bench/decode_compare.py "$OUT" > "$OUT/compare.txt"; tail -4 "$OUT/compare.txt"

timeout 120 python3 bench/kernels_fp8.py --no-extend > "$OUT/fp8_new.log" 2>&1
stamp "fp8 new rc=$?"; grep -E "^ps=|fp8 decode page" "$OUT/fp8_new.log"
noFI="${PYTHONPATH//\/tmp\/fi:/}"
( cd .carry/base && PYTHONPATH="${basepp//\/tmp\/fi:/}" RADIXKV_BUILD_DIR=/tmp/rkb_base \
    timeout 120 python3 bench/kernels_fp8.py --no-extend ) > "$OUT/fp8_base.log" 2>&1
stamp "fp8 base rc=$?"; grep -E "^ps=" "$OUT/fp8_base.log"
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_fp8_gpu.py -k "extend" > "$OUT/fp8ext_tests.txt" 2>&1
stamp "fp8 extend tests rc=$?: $(tail -1 "$OUT/fp8ext_tests.txt")"; grep -E "^FAILED|^ERROR" "$OUT/fp8ext_tests.txt" | head
timeout 100 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext.log" 2>&1
stamp "fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext.log"
stamp done
