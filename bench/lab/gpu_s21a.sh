#!/usr/bin/env bash
# bench/lab/gpu_s21a.sh -- session 21, first H200 call, on the full library prebuilt here from
# main's hip/ (251379f6ffa90a1f: the request metadata by ld.global.nc, never GPU-tested before):
# every GPU test file; the extend grid and ragged batches against FlashInfer; the demo on cuda; the
# short-context diagnostic (bench/lab/ext21_small.py: P=0 E=128 / 512 on page 1, page 1 in runs of
# 16, page 16). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21a /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
run_logged small128 "$OUT/small128.log" 90 python3 bench/lab/ext21_small.py --extend 128 --out "$OUT/small128.json"
grep -E "^E=" "$OUT/small128.log"
run_logged small512 "$OUT/small512.log" 90 python3 bench/lab/ext21_small.py --extend 512 --rounds 2 --out "$OUT/small512.json"
grep -E "^E=" "$OUT/small512.log"
run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
tail -3 "$OUT/demo.txt"
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s21a.tgz . && rm -rf ./* && mv /tmp/s21a.tgz . )
stamp done
