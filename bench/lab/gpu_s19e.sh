#!/usr/bin/env bash
# bench/lab/gpu_s19e.sh -- session 19, H200 call 6: Nsight Compute on FP8 decode's one-wave cell
# B=16 L=32768 at page 1 and page 16 (0.91 vs 0.89 of the read stream), the full library of the
# final hip/: speed of light, memory workload, warp states and scheduler statistics of one launch
# (caches flushed between replays, ncu's default). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19e /tmp/out
use_prebuilt_library
[[ -n "$NCU_BIN" ]] || { echo "no ncu"; exit 1; }
for ps in 1 16; do
  timeout 200 "$NCU_BIN" --kernel-name regex:decode_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    --metrics "regex:smsp__warp_issue_stalled_.*_per_warp_active.pct,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__sectors_read.sum" \
    python3 bench/lab/fp8_ncu.py --kv e4m3 --batch 16 --length 32768 --page "$ps" --calls 3 \
    > "$OUT/ncu_p$ps.txt" 2>&1
  stamp "ncu page $ps rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|dram__bytes_read.sum|dram__sectors_read|lts__t_sectors_srcunit|Issue Slots Busy|Warp Cycles Per Issued|L2 Hit Rate|Eligible Warps|No Eligible" "$OUT/ncu_p$ps.txt" | head -16
  grep -E "stalled" "$OUT/ncu_p$ps.txt" | awk '$NF+0 >= 2' | head -12
done
( cd "$OUT" && tar czf /tmp/s19e.tgz . && rm -rf ./* && mv /tmp/s19e.tgz . )
stamp done
