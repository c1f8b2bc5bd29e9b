#!/usr/bin/env bash
# bench/gpu_fp8_engine.sh -- issue 13's engine part on the GPU machine, in one command from the
# repository root: a narrow JIT build (head_dim 128, bf16, page 16, e4m3 caches; or the prebuilt
# library when it matches hip/), the engine's FP8 GPU test (kernels + CUDA graphs on an FP8 pool),
# then bench/serve.py on trace (b) (unique 1152-token prompts, 128 new tokens, Llama-3-8B shape,
# random bf16 weights, page 16) with an e4m3 pool and again with a bf16 pool of the same bytes
# (--kv-compare): tok/s, pool tokens, peak KV in use, preemptions and token agreement of both.
# Logs and JSON go to $OUT. Expected (estimated, not yet run): ~2-4 min build (less with a matching
# prebuilt library), ~1 min test, ~2-3 min serving; the timeouts keep it under 10 min.
# usage (device tool, repository root, same carry as bench/gpu_run.sh):
#   bash bench/gpu_fp8_engine.sh
#   FP8_POOL_GIB=16 FP8_REQUESTS=128 bash bench/gpu_fp8_engine.sh   # another budget / size
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/bench/results/run}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_fp8_engine.log") 2>&1
echo "=== radixkv gpu_fp8_engine $(git rev-parse --short HEAD 2>/dev/null) at $(date -u +%H:%M:%S)"
source bench/gpu_env.sh
export RADIXKV_HEAD_DIMS="${RADIXKV_HEAD_DIMS:-128}" RADIXKV_DTYPES="${RADIXKV_DTYPES:-bf16}" \
  RADIXKV_PAGE_SIZES="${RADIXKV_PAGE_SIZES:-16}" RADIXKV_KV_DTYPES="${RADIXKV_KV_DTYPES:-e4m3}"
use_prebuilt_library
t0=$SECONDS
python3 -c "from radixkv.ops import loader; loader.load(); print('kernel library ready')" \
  || { echo "BUILD FAILED"; exit 1; }
echo "[gpu_fp8_engine] build $((SECONDS - t0)) s"
rc=0
echo "=== engine FP8 GPU test ($(date -u +%H:%M:%S))"
timeout 240 python3 -m pytest -q -s -p no:cacheprovider tests/test_engine_fp8.py -m gpu \
  --junitxml="$OUT/pytest_engine_fp8_gpu.xml" > "$OUT/pytest_engine_fp8_gpu.log" 2>&1 || rc=1
grep -E "^FP8 kernels|passed|failed|Error" "$OUT/pytest_engine_fp8_gpu.log" | tail -15
echo "=== bench/serve.py trace (b): e4m3 vs bf16 KV at ${FP8_POOL_GIB:-8} GiB ($(date -u +%H:%M:%S))"
timeout 360 python3 bench/serve.py --device cuda --traces unique --no-extra-runs \
  --kv-dtype fp8 --kv-compare --pool-gib "${FP8_POOL_GIB:-8}" --requests "${FP8_REQUESTS:-256}" \
  --json "$OUT/serve_fp8.json" || rc=1
echo "=== done at $(date -u +%H:%M:%S), $((SECONDS - t0)) s, rc $rc"
exit $rc
