#!/usr/bin/env bash
# bench/lab/gpu_check_cost.sh -- what hip/guard.h's device-side input checks cost paged decode, on
# one GPU in one call (~3 min): the shipped kernels ("checked"), an unchecked copy
# (bench/lab/check_cost.py --patch) and, if .carry/base/hip exists (`git archive REV hip | tar -x
# -C .carry/base`), another commit's kernels ("base") are built side by side (narrow: D=128, bf16,
# page sizes 1 and 16), then timed in alternating processes, PASSES each, on bench/kernels.py's
# uniform and ragged decode cells. Output: $OUT/check_cost.{jsonl,md}.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
PASSES="${PASSES:-3}"
mkdir -p "$OUT"
source bench/gpu_env.sh
t0=$SECONDS
narrow=(RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_KV_DTYPES=none RADIXKV_PAGE_SIZES=1,16)
python3 bench/lab/check_cost.py --patch hip /tmp/hip_unchecked || exit 2
declare -A src=([checked]="$PWD/hip" [unchecked]=/tmp/hip_unchecked)
[[ -d .carry/base/hip ]] && src[base]="$PWD/.carry/base/hip"
for t in "${!src[@]}"; do
  env "${narrow[@]}" RADIXKV_BUILD_DIR="/tmp/rkb_$t" RADIXKV_HIP_DIR="${src[$t]}" MAX_JOBS=6 \
    python3 -c "from radixkv.ops import loader; loader.load(); print('$t build ok')" > "$OUT/build_$t.txt" 2>&1 &
done
wait
for t in "${!src[@]}"; do echo "[check_cost $((SECONDS - t0)) s] $(tail -1 "$OUT/build_$t.txt")"; done
rm -f "$OUT/check_cost.jsonl"
for ((i = 0; i < PASSES; i++)); do
  for t in "${!src[@]}"; do
    env "${narrow[@]}" RADIXKV_BUILD_DIR="/tmp/rkb_$t" RADIXKV_HIP_DIR="${src[$t]}" timeout 120 \
      python3 bench/lab/check_cost.py --time "$t" --out "$OUT/check_cost.jsonl" > "$OUT/pass_${t}_$i.txt" 2>&1
    echo "[check_cost $((SECONDS - t0)) s] pass $i $t: $(tail -1 "$OUT/pass_${t}_$i.txt")"
  done
done
python3 bench/lab/check_cost.py --compare "$OUT/check_cost.jsonl" | tee "$OUT/check_cost.md"
