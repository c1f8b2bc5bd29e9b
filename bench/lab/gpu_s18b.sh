#!/usr/bin/env bash
# bench/lab/gpu_s18b.sh -- session 18, H200 call 2, on the full library prebuilt here from this
# checkout's hip/ (bench/prebuild.sh): every GPU test file; FP8 decode (bench/kernels_fp8.py
# --no-extend) against a narrow variant whose two-blocks-per-SM FP8 shape also runs 8 warps of 3
# stages (.carry/var_ww.so), order main, ww, ww, main; FP8 extend; the extend grid and ragged
# batches against FlashInfer; the demo on cuda. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s18b /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
full="$RADIXKV_PREBUILT_LIB"
ww="$PWD/.carry/var_ww.so"
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
i=0
for tag in main ww ww main; do
  i=$((i + 1))
  lib="$full"; [[ $tag == ww ]] && lib="$ww"
  RADIXKV_PREBUILT_LIB="$lib" run_logged "fp8_$tag" "$OUT/fp8_${i}_$tag.log" 120 \
    python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8_${i}_$tag"
  grep -E "geomean" "$OUT/fp8_${i}_$tag.log" | head -2
done
run_logged fp8_extend "$OUT/fp8_extend.log" 120 python3 bench/kernels_fp8.py --no-decode --out "$OUT/fp8x"
tail -4 "$OUT/fp8_extend.log"
run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 150 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
tail -5 "$OUT/demo.txt"
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s18b.tgz . && rm -rf ./* && mv /tmp/s18b.tgz . )
stamp done
