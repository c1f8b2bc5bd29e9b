#!/usr/bin/env bash
# bench/lab/gpu_s21g.sh -- session 21, seventh H200 call, on the full library prebuilt here from the
# final hip/ (the single-tile extend_ws instance as one persistent CTA per SM): every GPU test file;
# the extend grid and ragged batches against FlashInfer (kernels in turns); the demo on cuda; then
# memcheck over the extend tests while time is left. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21g /tmp/out
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
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [[ -n "$SAN" ]] && (( SECONDS - _rk_t0 < 330 )); then
  run_logged "memcheck extend" "$OUT/memcheck_extend.txt" 120 "$SAN" --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
  grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck_extend.txt" | tail -3
fi
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s21g.tgz . && rm -rf ./* && mv /tmp/s21g.tgz . )
stamp done
