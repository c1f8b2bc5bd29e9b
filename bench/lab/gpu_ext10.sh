#!/usr/bin/env bash
# bench/lab/gpu_ext10.sh -- one H200 call for the persistent extend_ws kernel: the kernel library
# (prebuilt when .carry holds one for these sources, else a full JIT build), every GPU test file,
# the demo on cuda, bench/kernels_extend.py (bf16 vs FlashInfer fa2/fa3) and bench/kernels_fp8.py
# --no-decode (FP8 extend vs bf16).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext10 /tmp/out
export MAX_JOBS=16
use_prebuilt_library
build_kernels "$OUT/build.txt" 300 || exit 1
timeout 100 python3 bench/kernels_extend.py --out "$OUT/ext" > "$OUT/ext.log" 2>&1
stamp "extend bench rc=$?"; grep -E "^\| " "$OUT/ext.log" | tail -19; rm -f "$OUT"/ext/*.png
timeout 270 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py \
  tests/test_fp8_gpu.py tests/test_decode_plan.py tests/test_extend_gpu.py tests/test_engine.py \
  tests/test_engine_fp8.py tests/test_models_gpu.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "GPU tests rc=$?: $(tail -1 "$OUT/pytest_gpu.txt")"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
timeout 80 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext.log" 2>&1
stamp "fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext.log"
timeout 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json" > "$OUT/demo.txt" 2>&1
stamp "demo rc=$?"; tail -5 "$OUT/demo.txt"
stamp done
