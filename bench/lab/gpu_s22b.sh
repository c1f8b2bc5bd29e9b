#!/usr/bin/env bash
# bench/lab/gpu_s22b.sh -- session 22, second H200 call, on the full library prebuilt here from the
# final hip/ (extend_ws's single-tile instance as one persistent CTA per SM): every GPU test file;
# the extend grid and ragged batches against FlashInfer (kernels in turns); the short-context
# diagnostic (bench/lab/ext21_small.py: its max_kv_len = 0 column is now the persistent instance);
# the demo on cuda; compute-sanitizer memcheck over the extend fault tests and the extend tests.
# One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22b /tmp/out
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
run_logged small "$OUT/small.log" 60 python3 bench/lab/ext21_small.py --rounds 3 --out "$OUT/small128.json"
tail -4 "$OUT/small.log"
run_logged small512 "$OUT/small512.log" 60 python3 bench/lab/ext21_small.py --rounds 3 --extend 512 --out "$OUT/small512.json"
tail -4 "$OUT/small512.log"
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [[ -n "$SAN" ]]; then
  run_logged "memcheck faults" "$OUT/memcheck_faults.txt" 150 "$SAN" --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_kernel_faults_gpu.py -k extend
  grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_faults.txt" | head -8
  run_logged "memcheck extend" "$OUT/memcheck_extend.txt" 200 "$SAN" --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
  grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_extend.txt" | head -8
fi
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s22b.tgz . && rm -rf ./* && mv /tmp/s22b.tgz . )
stamp done
