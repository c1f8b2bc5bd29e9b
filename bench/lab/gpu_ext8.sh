#!/usr/bin/env bash
# bench/lab/gpu_ext8.sh -- one H200 call for FP8 caches in the warp-specialised extend kernel:
# full JIT build; tests/test_fp8_gpu.py extend cases and tests/test_extend_gpu.py; then
# bench/kernels_fp8.py --no-decode (FP8 vs bf16 extend per cell) and bench/kernels_extend.py
# (bf16 vs FlashInfer fa2/fa3, the 16-bit path's refactor).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext8 /tmp/out
export RADIXKV_BUILD_DIR=/tmp/rkb_full MAX_JOBS=16
build_kernels "$OUT/build.txt" 300 || exit 1
timeout 200 python3 -m pytest -q -x -s -p no:cacheprovider tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales" \
  > "$OUT/fp8_tests.txt" 2>&1
stamp "fp8 extend tests rc=$?: $(tail -1 "$OUT/fp8_tests.txt")"
grep -E "^FAILED|^ERROR|Error|assert" "$OUT/fp8_tests.txt" | head -10; grep -E "^\[fp8 extend\].*D=128" "$OUT/fp8_tests.txt" | head -8
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_extend_gpu.py > "$OUT/ext_tests.txt" 2>&1
stamp "extend tests rc=$?: $(tail -1 "$OUT/ext_tests.txt")"; grep -E "^FAILED|^ERROR" "$OUT/ext_tests.txt" | head
timeout 120 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext.log" 2>&1
stamp "fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext.log"
timeout 150 python3 bench/kernels_extend.py --out "$OUT/ext" > "$OUT/ext.log" 2>&1
stamp "extend bench rc=$?"; grep -E "^\| " "$OUT/ext.log" | tail -19; rm -f "$OUT"/ext/*.png
stamp done
