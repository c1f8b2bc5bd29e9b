#!/usr/bin/env bash
# bench/lab/gpu_slots11.sh -- one H200 call: the library prebuilt here (bench/prebuild.sh), then
# bench/kernels_fp8.py decode on every cell (FlashInfer in the run) with the product's plan, then
# the same cells with the plan sized for 2 blocks per SM (bench/lab/slots_ab.py): per cell, FP8
# and bf16, whether a second block per SM helps the long cells without hurting the short ones.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_slots11 /tmp/out
export RADIXKV_BUILD_DIR=/tmp/rkb_full MAX_JOBS=16
use_prebuilt_library
build_kernels "$OUT/build.txt" 240 || exit 1
timeout 200 python3 bench/kernels_fp8.py --no-extend --out "$OUT/x1.json" > "$OUT/x1.log" 2>&1
stamp "x1 rc=$?"; grep -E "^ps=|fp8 decode page" "$OUT/x1.log"
noFI="${PYTHONPATH//\/tmp\/fi:/}"
PYTHONPATH="$noFI" timeout 200 python3 bench/lab/slots_ab.py --per-sm 2 --no-extend \
  --out "$OUT/x2.json" > "$OUT/x2.log" 2>&1
stamp "x2 rc=$?"; grep -E "^ps=|slots_ab|fp8 decode page" "$OUT/x2.log"
stamp done
