#!/usr/bin/env bash
# bench/lab/gpu_s21c.sh -- session 21, third H200 call, on the full library prebuilt here from the
# final hip/ (the two-CTA extend kernel's request metadata in one round trip): every GPU test file;
# then the benchmarks with every compared kernel timed in turns (Timer.interleaved): the extend grid
# and ragged batches, decode (uniform + ragged, no sweep), the demo on cuda, and FP8 decode /
# extend while time is left. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21c /tmp/out
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
run_logged decode "$OUT/decode.log" 120 python3 bench/kernels.py --ragged --no-sweep --no-write-column --no-extend --out "$OUT/dec"
grep -E "B=  1 L=32768|geomean|target|ragged" "$OUT/decode.log" | head -20
if (( SECONDS - _rk_t0 < 400 )); then
  run_logged fp8 "$OUT/fp8.log" 120 python3 bench/kernels_fp8.py --out "$OUT/fp8"
  grep -E "geomean|worst" "$OUT/fp8.log" | head -4
fi
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s21c.tgz . && rm -rf ./* && mv /tmp/s21c.tgz . )
stamp done
