#!/usr/bin/env bash
# bench/lab/gpu_ext9c.sh -- one H200 call for FP8 extend_ws with the producer loading FP8 rows straight
# into registers (L2 prefetch two tiles ahead): a build of D = 128, pages 1/16 (every dtype); the
# FP8 extend tests and the extend tests; the FP8 extend bench.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext9c /tmp/out
export RADIXKV_HEAD_DIMS=128 RADIXKV_PAGE_SIZES=1,16 MAX_JOBS=16 RADIXKV_BUILD_DIR=/tmp/rkb_F
build_kernels "$OUT/build.txt" 150 || exit 1
timeout 90 python3 -m pytest -q -x -s -p no:cacheprovider tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales" \
  > "$OUT/fp8_tests.txt" 2>&1
stamp "fp8 extend tests rc=$?: $(tail -1 "$OUT/fp8_tests.txt")"
grep -E "^FAILED|^ERROR|Error|assert" "$OUT/fp8_tests.txt" | head -10; grep -E "^\[fp8 extend\]" "$OUT/fp8_tests.txt" | head -12
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_extend_gpu.py > "$OUT/ext_tests.txt" 2>&1
stamp "extend tests rc=$?: $(tail -1 "$OUT/ext_tests.txt")"; grep -E "^FAILED|^ERROR" "$OUT/ext_tests.txt" | head
timeout 60 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext.log" 2>&1
stamp "fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext.log"
stamp done
