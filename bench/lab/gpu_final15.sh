#!/usr/bin/env bash
# bench/lab/gpu_final15.sh -- session 15's closing H200 call on the full library prebuilt here
# (bench/prebuild.sh): every GPU test file, the short extend cells with and without max_kv_len
# (bench/lab/ext15_small.py, twice in alternation), bench/kernels_extend.py's grid with FlashInfer
# fa2/fa3, FP8 vs bf16 extend (bench/kernels_fp8.py --no-decode), then the demo on cuda. Few files
# under $OUT (the device returns at most eight).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_final15 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py \
  tests/test_fp8_gpu.py tests/test_decode_plan.py tests/test_extend_gpu.py tests/test_engine.py \
  tests/test_engine_fp8.py tests/test_models_gpu.py tests/test_engine_scale.py tests/test_cli.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "GPU tests rc=$?: $(tail -1 "$OUT/pytest_gpu.txt")"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
cells="1:0:128,1:0:512,1:256:128,1:512:128,16:0:128,16:0:512,16:256:128,16:512:128"
for round in 1 2; do
  for hint in "" --max-kv; do
    tag="$([[ -n "$hint" ]] && echo bound || echo nobound)/$round"
    timeout 100 python3 bench/lab/ext15_small.py --cells "$cells" --tag "$tag" $hint >> "$OUT/small.log" 2>&1
    stamp "small cells $tag rc=$?"; grep -E "^\[$tag\]" "$OUT/small.log"
  done
done
timeout 150 python3 bench/kernels_extend.py --out /tmp/ext_out > "$OUT/extend.log" 2>&1
stamp "kernels_extend rc=$?"; grep -E "^\| " "$OUT/extend.log" | tail -19
cp /tmp/ext_out/extend_attention.json "$OUT/" 2>/dev/null
timeout 100 python3 bench/kernels_fp8.py --no-decode --out "$OUT" > "$OUT/fp8.log" 2>&1
stamp "fp8 extend rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8.log"
timeout 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json" > "$OUT/demo.txt" 2>&1
stamp "demo rc=$?"; tail -5 "$OUT/demo.txt"
stamp done
