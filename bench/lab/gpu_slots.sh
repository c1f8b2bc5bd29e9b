#!/usr/bin/env bash
# bench/lab/gpu_slots.sh -- one H200 call: (a) narrow builds of this checkout and of .carry/base
# (a git archive of an older main: hip/ python/ bench/); (b) bench/kernels_fp8.py decode on this
# checkout (FlashInfer in the run); (c) the same cells at B = 1 and 16 with the plan sized for 2
# blocks per SM (bench/lab/slots_ab.py); (d) the base package's decode on all cells (no FlashInfer:
# the cost of what changed between the two, per cell); (e) ncu warp-stall source counters of the
# FP8 kernel at B=1 L=512, pages 1 and 16.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_slots /tmp/out
narrow=(RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16 RADIXKV_KV_DTYPES=e4m3)
( cd .carry/base && env "${narrow[@]}" PYTHONPATH="$PWD/python:$PYTHONPATH" RADIXKV_BUILD_DIR=/tmp/rkb_base \
    MAX_JOBS=6 python3 -c "from radixkv.ops import loader; loader.load(); print('base lib ok')" ) \
  > "$OUT/build_base.txt" 2>&1 &
bpid=$!
export "${narrow[@]}" RADIXKV_BUILD_DIR=/tmp/rkb_new MAX_JOBS=10
build_kernels "$OUT/build_new.txt" 400 || exit 1
wait $bpid; stamp "base build: $(tail -1 "$OUT/build_base.txt")"

timeout 300 python3 bench/kernels_fp8.py --no-extend > "$OUT/new.log" 2>&1
stamp "new rc=$?"; grep -E "^ps=|fp8 decode page" "$OUT/new.log"
noFI="${PYTHONPATH//\/tmp\/fi:/}"
PYTHONPATH="$noFI" timeout 150 python3 bench/lab/slots_ab.py --per-sm 2 --no-extend --batches 1,16 \
  > "$OUT/x2.log" 2>&1
stamp "x2 rc=$?"; grep -E "^ps=|slots_ab" "$OUT/x2.log"
( cd .carry/base && PYTHONPATH="$PWD/python:${noFI//$_rk_repo\/python:/}" RADIXKV_BUILD_DIR=/tmp/rkb_base \
    timeout 200 python3 bench/kernels_fp8.py --no-extend ) > "$OUT/base.log" 2>&1
stamp "base rc=$?"; grep -E "^ps=" "$OUT/base.log"
if [[ -n "$NCU_BIN" ]]; then
  for ps in 1 16; do
    timeout 90 "$NCU_BIN" --clock-control none --kernel-name regex:decode_kernel --launch-skip 2 \
      --launch-count 1 --set full --import-source yes -o /tmp/ncu_ps$ps -f \
      python3 bench/lab/fp8_ncu.py --kv e4m3 --batch 1 --length 512 --page $ps > /tmp/ncu_run$ps.txt 2>&1
    "$NCU_BIN" --import /tmp/ncu_ps$ps.ncu-rep --page source --csv --print-source sass \
      > /tmp/sass_ps$ps.csv 2>&1
    "$NCU_BIN" --import /tmp/ncu_ps$ps.ncu-rep --page details --section WarpStateStats \
      --section SpeedOfLight --section LaunchStats > "$OUT/ncu_ps$ps.txt" 2>&1
    stamp "ncu ps=$ps: $(grep -E "Duration" "$OUT/ncu_ps$ps.txt" | head -1)"
  done
  tar czf "$OUT/sass.tgz" -C /tmp sass_ps1.csv sass_ps16.csv
fi
stamp done
