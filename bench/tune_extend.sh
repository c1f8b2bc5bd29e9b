#!/usr/bin/env bash
# Tuning run for extend_attention on the GPU machine: builds several compile-time variants of the
# kernel (bf16, head_dim 128 only) in parallel, times each on a few cells of the benchmark grid
# (FlashInfer fa2/fa3 once, for reference), and optionally profiles one variant with ncu.
#
# usage: bash bench/tune_extend.sh OUT_DIR "name=-DFLAG=1,-DFLAG2=2" ...
# Every variant's output is also compared with a float32 reference (--check; "ref" column).
# env:   CELLS (ps:P:E,...), REPS, NCU_VARIANT (a name from the list: profile it with ncu),
#        NO_ANCHORS=1 (skip FlashInfer)
set -uo pipefail
out="$1"; shift
cells="${CELLS:-16:4096:512,16:0:2048,16:0:512,1:1024:512}"
reps="${REPS:-15}"
base="-DRADIXKV_HD_64=0,-DRADIXKV_HD_256=0,-DRADIXKV_DT_FP16=0"
source bench/gpu_env.sh  # FlashInfer, Rust extension, NCU_BIN
export RADIXKV_BUILD_DIR=/tmp/rkx
mkdir -p "$out"

# Build every variant at once (one process each: each loads its own copy of the op).
for v in "$@"; do
  name="${v%%=*}"; flags="${v#*=}"
  python3 -c "import sys; sys.path.insert(0, 'bench'); import kernels_extend as k; \
k.build_variant('$name', [f for f in '$base,$flags'.split(',') if f])" >"$out/build_$name.log" 2>&1 &
done
wait
first=1
for v in "$@"; do
  name="${v%%=*}"; flags="${v#*=}"
  anchors="--no-anchors"
  if [[ $first -eq 1 && -z "${NO_ANCHORS:-}" ]]; then anchors="--sglang-src .anchors/sglang_triton"; fi
  first=0
  echo "== variant $name ($flags)"
  timeout 150 python3 bench/kernels_extend.py --variant "$name=$base,$flags" --cells "$cells" \
    --reps "$reps" --check $anchors 2>&1 | tee "$out/tune_$name.log" | grep -E "^ps=|Error|error" | head -20
done
if [[ -n "${NCU_VARIANT:-}" ]]; then
  for v in "$@"; do
    name="${v%%=*}"; flags="${v#*=}"
    [[ "$name" == "$NCU_VARIANT" ]] || continue
    timeout 150 "$NCU_BIN" --clock-control none -k regex:extend_attention_kernel --launch-skip 3 \
      --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
      --section InstructionStats --section SourceCounters \
      python3 bench/kernels_extend.py --variant "$name=$base,$flags" --cells 16:4096:512 --reps 1 \
      --no-anchors >"$out/ncu_$name.txt" 2>&1
    grep -E "Warp Cycles|Issued Ipc|Eligible Warps|Registers Per|Compute .SM. Throughput|highest-utilized|Est. Speedup|stalled|stall" \
      "$out/ncu_$name.txt" | head -40
    so="$(ls /tmp/rkx/$name/*.so | head -1)"
    cuobjdump -sass "$so" >"$out/sass_$name.txt" 2>&1 || true
  done
fi
