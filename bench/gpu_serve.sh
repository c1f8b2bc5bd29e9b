#!/usr/bin/env bash
# Issue 11 on the GPU in one command: kernel library, the engine's GPU tests (CUDA graphs vs eager,
# no reference fallback), the demo on cuda, then bench/serve.py. Logs, JSON and PNG go to $OUT.
#
# usage (device tool, repository root, same carry as bench/lab/gpu_run.sh):
#   bash bench/gpu_serve.sh              # about 4-5 min on an H200 (estimated): every run of
#                                        # serve.py, the max-length contiguous baseline included
#   RADIXKV_SERVE_ARGS="--hf-baseline" bash bench/gpu_serve.sh   # + vs-transformers ratios
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_serve.log") 2>&1
echo "=== radixkv gpu_serve $(git rev-parse --short HEAD 2>/dev/null) at $(date -u +%H:%M:%S)"
source bench/gpu_env.sh
use_prebuilt_library
python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
  || { echo "BUILD FAILED"; exit 1; }
rc=0
echo "=== engine GPU tests ($(date -u +%H:%M:%S))"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_engine_scale.py tests/test_engine.py \
  -k gpu --junitxml="$OUT/pytest_engine_gpu.xml" > "$OUT/pytest_engine_gpu.log" 2>&1 || rc=1
tail -15 "$OUT/pytest_engine_gpu.log"
echo "=== demo on cuda ($(date -u +%H:%M:%S))"
timeout 120 python3 -m radixkv demo --device cuda --quiet --json "$OUT/demo_cuda.json" || rc=1
echo "=== bench/serve.py ($(date -u +%H:%M:%S))"
# shellcheck disable=SC2086
timeout 540 python3 bench/serve.py --device cuda ${RADIXKV_SERVE_ARGS---quick} \
  --json "$OUT/serve.json" --png "$OUT/serve.png" || rc=1
echo "=== done at $(date -u +%H:%M:%S), rc $rc"
exit $rc
