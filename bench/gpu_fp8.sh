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
gpu_begin gpu_fp8 bench/results
steps="${FP8_STEPS:-tests bench}"
rc=0
build_kernels "$OUT/build.txt" || exit 1
if [[ " $steps " == *" tests "* ]]; then
  python3 -m pytest tests/test_fp8_gpu.py -q -s -p no:cacheprovider 2>&1 | tee "$OUT/fp8_tests.log" \
    | grep -E "^\[fp8|passed|failed|error|FAILED|Error" | tail -80
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  python3 -m pytest tests/test_kernels_gpu.py tests/test_extend_gpu.py -q -x -p no:cacheprovider 2>&1 \
    | tail -15
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  stamp "tests done"
fi
if [[ " $steps " == *" bench "* ]]; then
  python3 bench/kernels_fp8.py --out "$OUT" 2>&1 | tee "$OUT/fp8_bench.log" | tail -70
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
stamp "rc=$rc"
exit $rc
