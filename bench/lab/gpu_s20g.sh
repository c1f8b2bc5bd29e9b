#!/usr/bin/env bash
# bench/lab/gpu_s20g.sh -- session 20, final H200 call, on the full library prebuilt here from the
# final hip/ (bench/prebuild.sh: one-round-trip request metadata in extend_ws, the pair steps' 7th
# stage in Q's space): every GPU test file; an A/B of the extend cells that run extend_ws, main's
# narrow library (.carry/var_main.so) against the final one, order main final main final; the
# extend grid and ragged batches against FlashInfer; the demo on cuda. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20g /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
full="$RADIXKV_PREBUILT_LIB"
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 330 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
CELLS="1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048"
for tag in main final main final; do
  lib="$full"; [[ $tag == main ]] && lib="$PWD/.carry/var_main.so"
  RADIXKV_PREBUILT_LIB="$lib" run_logged "ab $tag" "$OUT/ab_$tag.log" 120 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 0 --out "$OUT/ab"
  cat "$OUT/ab_$tag.log" >> "$OUT/ab_all.log"
done
run_logged grid "$OUT/extend.log" 150 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 150 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
tail -3 "$OUT/demo.txt"
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s20g.tgz . && rm -rf ./* && mv /tmp/s20g.tgz . )
stamp done
