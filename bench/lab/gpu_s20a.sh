#!/usr/bin/env bash
# bench/lab/gpu_s20a.sh -- session 20, H200 call 1: where a short extend CTA's time goes. The
# probe library (.carry/var_probe.so: hip/ + bench/lab/ext20_probe.patch, narrow) stamps every
# CTA (bench/lab/ext20_stamps.py); then Nsight Compute on P=0 E=2048 and P=4096 E=2048 (page 1,
# the pair-step instance, as the bench launches them). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20a /tmp/out
export RADIXKV_PREBUILT_LIB="$PWD/.carry/var_probe.so"
run_logged stamps "$OUT/stamps.log" 240 python3 bench/lab/ext20_stamps.py \
  --cells "${CELLS:-1:0:2048,1:4096:2048,1:1024:512,1:0:512,1:1024:2048,16:0:2048}" --out "$OUT/stamps"
cat "$OUT/stamps.log"
if [[ -n "$NCU_BIN" && "${NCU:-1}" == 1 ]]; then
  for cell in "0 2048" "4096 2048"; do
    read -r P E <<< "$cell"
    timeout 150 "$NCU_BIN" --kernel-name regex:extend_ws --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats --section InstructionStats \
      --section ComputeWorkloadAnalysis --section Occupancy \
      --metrics "regex:smsp__warp_issue_stalled_.*_per_warp_active.pct,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,gpc__cycles_elapsed.max" \
      python3 bench/lab/fp8_ext_ncu.py --kv bf16 --prefix "$P" --extend "$E" --page 1 --max-kv --calls 2 \
      > "$OUT/ncu_P${P}_E${E}.txt" 2>&1
    stamp "ncu P=$P E=$E rc=$?"
    grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|gmma|SM Active Cycles|Elapsed Cycles" "$OUT/ncu_P${P}_E${E}.txt" | head -10
    grep -E "stalled" "$OUT/ncu_P${P}_E${E}.txt" | awk '$NF+0 >= 1' | head -20
  done
fi
( cd "$OUT" && tar czf /tmp/s20a.tgz . && rm -rf ./* && mv /tmp/s20a.tgz . )
stamp done
