#!/usr/bin/env bash
# bench/lab/gpu_fp8dec.sh -- issue 13, FP8 decode speed (direct per-lane fragments in the NVIDIA
# narrow decode kernel, hip/fp8_decode.h "Direct fragments"), in one call on one H200:
#   (a) the CPU model of the fragment layout (bench/lab/fp8_direct_layout.py, seconds);
#   (b) a narrowed JIT build: bf16 q, page sizes 1 and 16, every head dim (64: 8-byte V copies,
#       256: two V copies per row), both FP8 types; cases needing other variants skip;
#   (c) tests/test_fp8_gpu.py (FP8 decode vs the dequantised reference, D 64/128/256, GQA 1/4/16/24,
#       CSR and block tables, splits 1/7) and the decode tests of tests/test_kernels_gpu.py (16-bit
#       decode, whose kernels must be unchanged);
#   (d) bench/kernels_fp8.py decode section (no extend): FP8 vs radixkv bf16 vs FlashInfer FP8 and
#       the read stream, 24 cells; summary lines at the end (targets: geomean x1.7 over bf16,
#       >= 0.90 of the read stream and >= 1.3x FlashInfer FP8 on cells >= 1 GB).
# Output under $OUT: layout.txt, build.txt, fp8_tests.txt, kernels_tests.txt, fp8_bench.log,
# fp8_kv.json. Expected: ~2-3 min build, ~2 min tests, ~3 min bench.
#   bash bench/lab/gpu_fp8dec.sh                      # everything
#   FP8DEC_STEPS="tests" bash bench/lab/gpu_fp8dec.sh  # or "bench" (the build is always done)
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_fp8dec bench/results/fp8dec
steps="${FP8DEC_STEPS:-tests bench}"
rc=0

# (a) layout model (no GPU)
python3 bench/lab/fp8_direct_layout.py > "$OUT/layout.txt" 2>&1 || rc=1
stamp "layout model: $(tail -1 "$OUT/layout.txt")"

# (b) narrowed build
export RADIXKV_BUILD_DIR="${RADIXKV_BUILD_DIR:-/tmp/rkb_fp8dec}" RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=1,16
build_kernels "$OUT/build.txt" 420 || exit 1

# (c) tests
if [[ " $steps " == *" tests "* ]]; then
  run_logged "fp8 tests" "$OUT/fp8_tests.txt" 240 \
    python3 -m pytest tests/test_fp8_gpu.py -q -x -s -p no:cacheprovider || rc=1
  grep -E "^\[fp8 decode" "$OUT/fp8_tests.txt" | tail -12
  run_logged "decode tests" "$OUT/kernels_tests.txt" 180 \
    python3 -m pytest tests/test_kernels_gpu.py -q -x -p no:cacheprovider \
    -k "not store_kv and not copy_blocks and not opcheck" || rc=1
fi

# (d) decode benchmark
if [[ " $steps " == *" bench "* ]]; then
  timeout 330 python3 bench/kernels_fp8.py --no-extend --out "$OUT" 2>&1 | tee "$OUT/fp8_bench.log" \
    | grep -E "read stream|^ps=|fp8 decode page|Error|error" | tail -40
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
stamp "rc=$rc"
exit $rc
