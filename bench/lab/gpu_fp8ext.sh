#!/usr/bin/env bash
# bench/lab/gpu_fp8ext.sh -- issue 13, extend on FP8 KV read directly by the kernel, on the GPU machine
# in one command from the repository root: JIT build (all instantiations: the tests need every
# head dim, dtype, page size and FP8 type, so no build scope narrows it), the extend FP8 GPU tests
# (tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales"), the 16-bit extend GPU tests
# (tests/test_extend_gpu.py), then the extend section of bench/kernels_fp8.py (FP8 vs bf16 extend,
# per cell, same run). Results under $OUT (or bench/results): build.txt, fp8ext_tests.log,
# extend_tests.log, fp8_extend.json, fp8ext_bench.log. Expected: ~3-4 min build, ~1-2 min tests,
# ~1 min bench.
#   bash bench/lab/gpu_fp8ext.sh                          # everything
#   FP8EXT_STEPS=tests bash bench/lab/gpu_fp8ext.sh       (or bench)
set -uo pipefail
source bench/gpu_env.sh
gpu_begin gpu_fp8ext bench/results
steps="${FP8EXT_STEPS:-tests bench}"
rc=0
build_kernels "$OUT/build.txt" || exit 1
if [[ " $steps " == *" tests "* ]]; then
  python3 -m pytest tests/test_fp8_gpu.py -q -s -p no:cacheprovider -k "extend or opcheck or bad_scales" \
    2>&1 | tee "$OUT/fp8ext_tests.log" | grep -E "^\[fp8|passed|failed|error|FAILED|Error" | tail -60
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  python3 -m pytest tests/test_extend_gpu.py -q -p no:cacheprovider 2>&1 | tee "$OUT/extend_tests.log" \
    | tail -15
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  stamp "tests done"
fi
if [[ " $steps " == *" bench "* ]]; then
  python3 bench/kernels_fp8.py --no-decode --out "$OUT" 2>&1 | tee "$OUT/fp8ext_bench.log" | tail -25
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
stamp "rc=$rc"
exit $rc
