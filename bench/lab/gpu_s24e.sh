#!/usr/bin/env bash
# bench/lab/gpu_s24e.sh -- session 24, fifth H200 call: the final hip/ (the two-CTA extend kernel
# with one loop body, rolled Q copies, K/V tile 0 issued before Q) in the full library.
# (1) A/B against session 23's main (narrow library), each in its own process, order main new main
# new. (2) Every GPU test file. (3) memcheck over the short-context, FP8 and fault extend tests.
# (4) The extend grid and ragged batches with FlashInfer fa2 / fa3; FP8 extend against bf16; demo.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s24e /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
NEW="$RADIXKV_PREBUILT_LIB"
for tag in main new main new; do
  lib="$NEW"; [[ $tag == main ]] && lib="$PWD/.carry/var_main.so"
  RADIXKV_PREBUILT_LIB="$lib" timeout 120 python3 bench/lab/ext21_ab.py --cells "1:0:128,16:0:128" \
    --tag "$tag" --out "$OUT/abj_$SECONDS" > "$OUT/log_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
grep -h -E "^(main|new) " "$OUT"/log_*.txt | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/res_ab.txt"
rm -rf "$OUT"/log_* "$OUT"/abj_*
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
[[ -n "$CS" ]] && run_logged memcheck "$OUT/memcheck.txt" 120 "$CS" --tool memcheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_fp8_gpu.py \
  -k "short_context or too_small or more_queries or page_outside or extend_fp8 or mixed_batch"
[[ -n "$CS" ]] && run_logged racecheck "$OUT/racecheck.txt" 100 "$CS" --tool racecheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k "short_context and bf16"
run_logged "grid" "$OUT/grid.txt" 150 python3 bench/kernels_extend.py --out "$OUT/results"
run_logged "ragged" "$OUT/ragged.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/results"
run_logged "fp8 extend" "$OUT/fp8.txt" 150 python3 bench/kernels_fp8.py --no-decode --out "$OUT/results"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/results/demo_cuda.json"
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/res_ab.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
for tool in memcheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/$tool.txt" | tail -3; done
echo "== grid"; tail -21 "$OUT/grid.txt"
echo "== ragged"; grep "ragged extend" "$OUT/ragged.txt"
echo "== fp8"; tail -20 "$OUT/fp8.txt"
echo "== demo"; grep -i -E "equal|verify|tokens" "$OUT/demo.txt" | head -4
rm -f "$OUT"/results/*.png
( cd "$OUT" && tar czf /tmp/s24e.tgz . && rm -rf ./* && mv /tmp/s24e.tgz . )
stamp done
