#!/usr/bin/env bash
# bench/lab/gpu_s23f.sh -- session 23, sixth H200 call: the final hip/ of branch ws-qring (persistent
# extend_ws: slot ring + the producer's L2 prefetch of Q; every consumer thread arrives on a slot's
# "empty" barrier; single tiles up to 2048 keys) in the full library. (1) A/B against main's narrow
# library, each in its own process, order main new main new. (2) Every GPU test file.
# (3) compute-sanitizer memcheck / synccheck / racecheck over the extend tests that run persistent
# CTAs with many slots, NaN tiles and bad plans. (4) The extend grid and ragged batches with
# FlashInfer fa2 / fa3 in the same run; the demo on cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23f /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
NEW="$RADIXKV_PREBUILT_LIB"
ab() {  # tag lib
  local log="$OUT/ab_$1_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$2" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$1" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $1 rc=$?"
}
CELLS="1:0:512,1:0:2048,16:0:2048,1:1024:128,1:1024:512,16:1024:512,1:1024:2048,1:fresh,1:short,1:tiny"
for tag in main new main new; do
  if [[ $tag == main ]]; then ab main "$PWD/.carry/var_main.so"; else ab new "$NEW"; fi
done
grep -h -E "^(main|new) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
rm -rf "$OUT"/ab_[0-9]* "$OUT"/ab_*.log
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
for tool in memcheck synccheck racecheck; do
  [[ -n "$CS" ]] && run_logged "$tool" "$OUT/$tool.txt" 120 "$CS" --tool $tool --print-limit 10 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
    -k "persistent_ctas or more_queries or bad_plan or plan_order or pair_steps or rank_order"
done
run_logged "grid" "$OUT/grid.txt" 150 python3 bench/kernels_extend.py --out "$OUT/results"
run_logged "ragged" "$OUT/ragged.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/results"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/results/demo_cuda.json"
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
for tool in memcheck synccheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/$tool.txt" | tail -3; done
echo "== grid"; tail -21 "$OUT/grid.txt"
echo "== ragged"; grep "ragged extend" "$OUT/ragged.txt"
echo "== demo"; grep -i -E "equal|verify|tokens" "$OUT/demo.txt" | head -4
( cd "$OUT" && tar czf /tmp/s23f.tgz . && rm -rf ./* && mv /tmp/s23f.tgz . )
stamp done
