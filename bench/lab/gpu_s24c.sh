#!/usr/bin/env bash
# bench/lab/gpu_s24c.sh -- session 24, third H200 call: the two-CTA extend kernel with less code
# (dense and masked tiles on one loop body, the Q copy loop rolled, the epilogue's stores unrolled
# by 2) in the full library. (1) Per-CTA stamps of that kernel (probe library, ext24_stamps.py).
# (2) Every GPU test file. (3) memcheck over the short-context, FP8 and fault extend tests. (4) The
# extend grid and ragged batches with FlashInfer fa2 / fa3; FP8 extend against bf16; the demo.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s24c /tmp/out
export RADIXKV_PREBUILT_LIB="$PWD/.carry/var_probe.so"
run_logged stamps "$OUT/stamps.txt" 120 \
  python3 bench/lab/ext24_stamps.py --cells 1:0:128,16:0:128 --out "$OUT/stamps"
run_logged stamps_noplan "$OUT/stamps_noplan.txt" 60 \
  python3 bench/lab/ext24_stamps.py --cells 1:0:128 --repeats 2 --no-plan --out "$OUT/stamps_np"
unset RADIXKV_PREBUILT_LIB
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
[[ -n "$CS" ]] && run_logged memcheck "$OUT/memcheck.txt" 120 "$CS" --tool memcheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_fp8_gpu.py \
  -k "short_context or too_small or more_queries or page_outside or extend_fp8 or mixed_batch"
run_logged "grid" "$OUT/grid.txt" 150 python3 bench/kernels_extend.py --out "$OUT/results"
run_logged "ragged" "$OUT/ragged.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/results"
run_logged "fp8 extend" "$OUT/fp8.txt" 150 python3 bench/kernels_fp8.py --no-decode --out "$OUT/results"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/results/demo_cuda.json"
echo "== stamps"; grep -v "^\[" "$OUT/stamps.txt" | head -40; grep -v "^\[" "$OUT/stamps_noplan.txt" | head -20
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
echo "== memcheck"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.txt" | tail -3
echo "== grid"; tail -21 "$OUT/grid.txt"
echo "== ragged"; grep "ragged extend" "$OUT/ragged.txt"
echo "== fp8"; tail -25 "$OUT/fp8.txt"
echo "== demo"; grep -i -E "equal|verify|tokens" "$OUT/demo.txt" | head -4
rm -f "$OUT"/results/*.png
( cd "$OUT" && tar czf /tmp/s24c.tgz . && rm -rf ./* && mv /tmp/s24c.tgz . )
stamp done
