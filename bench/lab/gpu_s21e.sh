#!/usr/bin/env bash
# bench/lab/gpu_s21e.sh -- session 21, fifth H200 call: Nsight Compute on one call of radixkv and
# of FlashInfer fa3 (and fa2 on the first cell) for two grid cells where fa3 leads (P=0 E=2048,
# P=1024 E=512, page 1): launch shape (grid, block, registers, shared memory, waves), speed of
# light, warp states, L2 / DRAM traffic. The full library prebuilt here from the final hip/.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21e /tmp/out
use_prebuilt_library
[[ -n "$NCU_BIN" ]] || { echo "no ncu"; exit 1; }
for cell in "0 2048" "1024 512"; do
  read -r P E <<< "$cell"
  for side in radixkv fa3 fa2; do
    [[ $side == fa2 && $P != 0 ]] && continue
    tag="${side}_P${P}_E${E}"
    timeout 120 "$NCU_BIN" --clock-control none --profile-from-start off --section LaunchStats \
      --section Occupancy --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
      --section SchedulerStats python3 bench/lab/ext21_ncu_pair.py --side $side --prefix $P --extend $E \
      > "$OUT/ncu_$tag.txt" 2>&1
    stamp "ncu $tag rc=$?"
    grep -E "^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Registers Per|Shared Memory Config|Dynamic Shared|Waves Per SM|Achieved Occupancy|Issue Slots Busy|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|No Eligible|Memory Throughput" "$OUT/ncu_$tag.txt" | head -40
  done
done
stamp done
