#!/usr/bin/env bash
# Issue 17 on 2 GPUs in one command: the CPU tensor-parallel tests, the demo with --tp 2 on cuda
# (NCCL, rank r on GPU r), then bench/serve.py --tp 2 against TP 1 in the same process on trace (b)
# (Llama-3-8B shape, bf16), once with each run's free memory as KV pool and once with a per-GPU KV
# budget too small for TP 1 at the trace's concurrency. Logs and JSON go to $OUT.
#
# usage (device tool, kind nvidia-h200-x2, repository root, same carry as bench/gpu_serve.sh):
#   bash bench/gpu_tp.sh            # about 6-8 min on 2 H200s (estimated, not yet run)
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_tp.log") 2>&1
echo "=== radixkv gpu_tp $(git rev-parse --short HEAD 2>/dev/null) at $(date -u +%H:%M:%S)"
export NCCL_NVLS_ENABLE=0  # the machine's notes: NVLink multicast off
source bench/gpu_env.sh
use_prebuilt_library
python3 -c "import torch; n = torch.cuda.device_count(); print('GPUs', n); assert n >= 2, 'need 2 GPUs'" \
  || exit 1
python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
  || { echo "BUILD FAILED"; exit 1; }
rc=0
echo "=== tensor-parallel tests, gloo on the CPU ($(date -u +%H:%M:%S))"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_tp.py \
  --junitxml="$OUT/pytest_tp.xml" > "$OUT/pytest_tp.log" 2>&1 || rc=1
tail -5 "$OUT/pytest_tp.log"
echo "=== demo --tp 2 on cuda, bf16, verified against the dense model ($(date -u +%H:%M:%S))"
timeout 180 python3 -m radixkv demo --device cuda --tp 2 --quiet --json "$OUT/demo_tp2.json" || rc=1
echo "=== serve.py --tp 2, trace (b), pool from free memory ($(date -u +%H:%M:%S))"
timeout 420 python3 bench/serve.py --device cuda --tp 2 --traces unique \
  --json "$OUT/serve_tp2.json" || rc=1
echo "=== serve.py --tp 2, trace (b), 2 GiB KV per GPU ($(date -u +%H:%M:%S))"
timeout 300 python3 bench/serve.py --device cuda --tp 2 --traces unique --pool-gib 2 \
  --json "$OUT/serve_tp2_budget.json" || rc=1
echo "=== done at $(date -u +%H:%M:%S), rc $rc"
exit $rc
