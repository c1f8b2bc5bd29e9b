#!/usr/bin/env bash
# bench/lab/gpu_final17.sh -- session 17's closing H200 call on the full library prebuilt here
# (bench/prebuild.sh): every GPU test file, bench/kernels_extend.py's grid and ragged batches (with
# and without the extend plan) against FlashInfer fa2 / fa3, where pair steps would pay below 2048
# keys (bench/lab/ext17_pair_bound.py), then the demo on cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_final17 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged /tmp/ragged.log 150 python3 bench/kernels_extend.py --ragged --out "$OUT"
grep -E "^\[ragged" /tmp/ragged.log
RADIXKV_OPS_BACKEND=extension run_logged pair_bound "$OUT/pair_bound.log" 90 python3 bench/lab/ext17_pair_bound.py
grep -E "^\[pair" "$OUT/pair_bound.log"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json /tmp/demo_cuda.json
tail -5 "$OUT/demo.txt"
stamp done
