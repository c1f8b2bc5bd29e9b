#!/usr/bin/env bash
# bench/lab/gpu_s22g.sh -- session 22, seventh H200 call (final library): Nsight Compute on the two
# short-prompt cases where FlashInfer's fa2 is at or ahead of radixkv: the ragged "tiny" batch (64
# fresh prompts of 16-256 tokens; radixkv as the op picks it = persistent extend_ws, radixkv with the
# short-context kernel forced, fa2) and the grid's P=0 E=128 (radixkv's two-CTA kernel, fa2).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22g /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
[[ -n "$NCU_BIN" ]] || { echo "no ncu"; exit 1; }
for spec in "radixkv tiny -" "radixkv tiny 1" "fa2 tiny -" "radixkv e128 -" "fa2 e128 -"; do
  read -r side what mk <<< "$spec"
  args=(--side "$side")
  [[ $what == tiny ]] && args+=(--ragged tiny) || args+=(--prefix 0 --extend 128)
  [[ $mk != - ]] && args+=(--max-kv "$mk")
  tag="${side}_${what}_${mk}"
  timeout 120 "$NCU_BIN" --clock-control none --profile-from-start off --section LaunchStats \
    --section Occupancy --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats python3 bench/lab/ext21_ncu_pair.py "${args[@]}" > "$OUT/ncu_$tag.txt" 2>&1
  stamp "ncu $tag rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Registers Per|Dynamic Shared|Waves Per SM|Achieved Occupancy|Achieved Active Warps|Issue Slots Busy|L2 Hit Rate|DRAM Throughput|Compute \(SM\)|No Eligible|Eligible Warps|Theoretical Occupancy" "$OUT/ncu_$tag.txt" | head -40
done
stamp done
