#!/usr/bin/env bash
# bench/lab/gpu_s22d.sh -- session 22, fourth H200 call, on the full library prebuilt here from the
# final hip/ (the persistent single-tile extend_ws instance; the short-context kernel only up to 256
# keys for either cache): every GPU test file; the extend grid and ragged batches against FlashInfer
# (kernels in turns); the short-context crossover (bench/lab/ext21_small.py at E = 160, 192, 224);
# the demo on cuda; FP8 extend against bf16 (fp8_extend.json); memcheck over the short-context
# tests. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22d /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
run_logged grid "$OUT/extend.log" 100 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 60 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
for e in 160 192 224; do
  run_logged "small $e" "$OUT/small$e.log" 60 python3 bench/lab/ext21_small.py --rounds 3 --extend $e --out "$OUT/small$e.json"
  tail -3 "$OUT/small$e.log"
done
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
run_logged fp8 "$OUT/fp8.log" 150 python3 bench/kernels_fp8.py --no-decode --out "$OUT/fp8"
grep -E "geomean|worst|x0\.|x1\." "$OUT/fp8.log" | tail -22
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [[ -n "$SAN" ]]; then
  run_logged "memcheck short" "$OUT/memcheck_short.txt" 120 "$SAN" --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k "short or more_queries or rank_order"
  grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_short.txt" | head -4
fi
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s22d.tgz . && rm -rf ./* && mv /tmp/s22d.tgz . )
stamp done
