#!/usr/bin/env bash
# Issue 11 items 1 and 4 (transformers side) on the GPU in one command: the bf16 model tests
# against transformers (greedy agreement, logits, CUDA-graph capture of forward), a checkpoint-free
# demo on a named shape, then transformers' continuous-batching baseline on the serving traces.
# Logs and JSON go to $OUT; bench/results/hf_baseline.json is written there too.
#
# usage (device tool, repository root, same carry as bench/lab/gpu_run.sh):
#   bash bench/gpu_hfmodel.sh    # about 5-8 min on an H200 (estimated; timeouts cap it at 590 s)
#   RADIXKV_HF_REQUESTS=32 bash bench/gpu_hfmodel.sh   # a shorter baseline
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_hfmodel.log") 2>&1
echo "=== radixkv gpu_hfmodel $(git rev-parse --short HEAD 2>/dev/null) at $(date -u +%H:%M:%S)"
source bench/gpu_env.sh
use_prebuilt_library
python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
  || { echo "BUILD FAILED"; exit 1; }
python3 -c "import transformers; print('transformers', transformers.__version__)" || exit 1
rc=0
echo "=== model GPU tests ($(date -u +%H:%M:%S))"
timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/test_models_gpu.py \
  --junitxml="$OUT/pytest_models_gpu.xml" > "$OUT/pytest_models_gpu.log" 2>&1 || rc=1
grep -E "free-running|teacher-forced|passed|failed|Error" "$OUT/pytest_models_gpu.log" | tail -12
echo "=== demo, random llama3.2-1b shape on cuda ($(date -u +%H:%M:%S))"
timeout 90 python3 -m radixkv demo --device cuda --model-shape llama3.2-1b --layers 4 \
  --pool-tokens 4096 --quiet --json "$OUT/demo_llama32_cuda.json" || rc=1
echo "=== bench/hf_baseline.py ($(date -u +%H:%M:%S))"
timeout 300 python3 bench/hf_baseline.py --device cuda --model-shape llama3-8b --timeout 100 \
  --requests "${RADIXKV_HF_REQUESTS:-64}" --out "$OUT/hf_baseline.json" || rc=1
cp -f "$OUT/hf_baseline.json" bench/results/hf_baseline.json 2>/dev/null || true
echo "=== done at $(date -u +%H:%M:%S), rc $rc"
exit $rc
