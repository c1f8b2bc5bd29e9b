#!/usr/bin/env bash
# bench/lab/gpu_s23d.sh -- session 23, fourth H200 call: the product form of the persistent instance
# (slot ring + the producer's L2 prefetch of each slot's Q rows) in the full library
# (.carry/radixkv_kernels_sm90.so, prebuilt from branch ws-qring's hip/). (1) A/B against main's
# narrow library, each in its own process, order main new main new. (2) Every GPU test file.
# (3) compute-sanitizer memcheck and synccheck over the extend tests that run the persistent
# instance. (4) The extend grid and ragged batches with FlashInfer fa2 / fa3 in the same run.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23d /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
NEW="$RADIXKV_PREBUILT_LIB"
ab() {  # tag lib
  local log="$OUT/ab_$1_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$2" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$1" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $1 rc=$?"
}
CELLS="1:0:512,16:0:512,1:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:fresh,16:fresh,1:short,1:tiny,16:tiny"
for tag in main new main new; do
  if [[ $tag == main ]]; then ab main "$PWD/.carry/var_main.so"; else ab new "$NEW"; fi
done
grep -h -E "^(main|new) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
rm -rf "$OUT"/ab_[0-9]* "$OUT"/ab_*.log
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)"
if [[ -n "$CS" ]]; then
  run_logged "memcheck extend" "$OUT/memcheck.txt" 150 "$CS" --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py -k "extend"
  run_logged "synccheck extend" "$OUT/synccheck.txt" 120 "$CS" --tool synccheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k "plan or ragged or mixed"
else
  echo "no compute-sanitizer"
fi
run_logged "grid" "$OUT/grid.txt" 150 python3 bench/kernels_extend.py --out "$OUT/results"
run_logged "ragged" "$OUT/ragged.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/results"
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
for f in memcheck synccheck; do [[ -f "$OUT/$f.txt" ]] && { echo "== $f"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/$f.txt" | tail -3; }; done
echo "== grid"; tail -21 "$OUT/grid.txt"
echo "== ragged"; grep "ragged extend" "$OUT/ragged.txt"
stamp done
