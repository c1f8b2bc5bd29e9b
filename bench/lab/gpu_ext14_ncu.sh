#!/usr/bin/env bash
# bench/lab/gpu_ext14_ncu.sh -- one H200 call (session 14): Nsight Compute warp-state statistics
# of extend_ws for two prebuilt libraries (.carry/var_<name>.so) on a small and a large cell of
# bench/kernels_extend.py (bench/lab/fp8_ext_ncu.py as the target; caches flushed between
# replays, ncu's default).
#   VARIANTS="v0 v4" bash bench/lab/gpu_ext14_ncu.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext14_ncu /tmp/out
[[ -n "$NCU_BIN" ]] || { echo "no ncu"; exit 1; }
read -r -a vs <<< "${VARIANTS:-v0 v4}"
for cell in "0 128 1" "4096 512 16"; do
  read -r P E PS <<< "$cell"
  for v in "${vs[@]}"; do
    tag="${v}_P${P}_E${E}"
    RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$v.so" timeout 150 "$NCU_BIN" --kernel-name regex:extend_ws \
      --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --section InstructionStats --metrics "regex:smsp__warp_issue_stalled_.*_per_warp_active.pct" python3 bench/lab/fp8_ext_ncu.py --kv bf16 --prefix "$P" --extend "$E" \
      --page "$PS" --calls 2 > "$OUT/ncu_$tag.txt" 2>&1
    stamp "ncu $tag rc=$?"
    grep -E "Duration|Warp Cycles Per Issued|Executed Instructions|Issue Slots Busy" "$OUT/ncu_$tag.txt" | head -8
    grep -E "stalled" "$OUT/ncu_$tag.txt" | awk '$NF+0 >= 1' | head -20
  done
done
stamp done
