#!/usr/bin/env bash
# bench/gpu_fp8.sh -- issue 13 (FP8 KV cache) on the GPU machine, in one command from the
# repository root: JIT build, the FP8 GPU tests, the 16-bit decode/store tests (their kernels are
# now templated on the cache element), then the FP8 benchmark (bench/kernels_fp8.py: 24 decode
# cells vs radixkv bf16 and FlashInfer FP8, extend FP8 vs bf16). Results under $OUT (or
# bench/results). Expected: ~4-6 min build, ~6 min tests, ~6 min bench.
#   bash bench/gpu_fp8.sh            # everything
#   FP8_STEPS=tests bash bench/gpu_fp8.sh   (or bench)
set -uo pipefail
source bench/gpu_env.sh
out="${OUT:-bench/results}"
mkdir -p "$out"
steps="${FP8_STEPS:-tests bench}"
rc=0
t0=$SECONDS
python3 -c "from radixkv.ops import loader; loader.load()" || exit 1
echo "[gpu_fp8] build $((SECONDS - t0)) s"
if [[ " $steps " == *" tests "* ]]; then
  python3 -m pytest tests/test_fp8_gpu.py -q -s -p no:cacheprovider 2>&1 | tee "$out/fp8_tests.log" \
    | grep -E "^\[fp8|passed|failed|error|FAILED|Error" | tail -80
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  python3 -m pytest tests/test_kernels_gpu.py tests/test_extend_gpu.py -q -x -p no:cacheprovider 2>&1 \
    | tail -15
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  echo "[gpu_fp8] tests done at $((SECONDS - t0)) s"
fi
if [[ " $steps " == *" bench "* ]]; then
  python3 bench/kernels_fp8.py --out "$out" 2>&1 | tee "$out/fp8_bench.log" | tail -70
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
echo "[gpu_fp8] rc=$rc, $((SECONDS - t0)) s"
exit $rc
