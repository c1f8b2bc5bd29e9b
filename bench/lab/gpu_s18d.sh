#!/usr/bin/env bash
# bench/lab/gpu_s18d.sh -- session 18's closing H200 call, on the full library prebuilt here from
# the final hip/ (bench/prebuild.sh): every GPU test file, FP8 decode twice
# (bench/kernels_fp8.py --no-extend), bf16 decode uniform and ragged (bench/kernels.py), the demo
# on cuda. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s18d /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
for i in 1 2; do
  run_logged "fp8_$i" "$OUT/fp8_$i.log" 120 python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8_$i"
  grep -E "geomean" "$OUT/fp8_$i.log" | head -2
done
run_logged decode "$OUT/decode.log" 150 \
  python3 bench/kernels.py --no-extend --no-sweep --no-write-column --ragged --page-sizes 1,16 --out "$OUT/dec"
tail -8 "$OUT/decode.log"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt"
( cd "$OUT" && tar czf /tmp/s18d.tgz . && rm -rf ./* && mv /tmp/s18d.tgz . )
stamp done
