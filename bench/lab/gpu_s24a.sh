#!/usr/bin/env bash
# bench/lab/gpu_s24a.sh -- session 24, first H200 call: the two-CTA extend kernel issuing its first
# two K/V tiles together (branch ext-pro2; full library of the working tree) against main's narrow
# library. (1) ext21_small.py (radixkv / no plan / extend_ws / fa2 / fa3 on P=0 E=128), each library
# in its own process, order main new main new. (2) ext21_ab.py on the short-context cells and the
# ragged short / tiny batches, same order. (3) The extend, FP8 and fault GPU test files.
# (4) compute-sanitizer memcheck and racecheck over the short-context tests.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s24a /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
NEW="$RADIXKV_PREBUILT_LIB"
MAIN="$PWD/.carry/var_main.so"
lib() { [[ $1 == main ]] && echo "$MAIN" || echo "$NEW"; }
for tag in main new main new; do
  RADIXKV_PREBUILT_LIB="$(lib $tag)" timeout 150 python3 bench/lab/ext21_small.py --rounds 2 \
    > "$OUT/small_${tag}_$SECONDS.txt" 2>&1
  stamp "small $tag rc=$?"
done
CELLS="1:0:128,16:0:128,1:0:256,16:0:256,1:0:512,1:256:128,1:short,16:short,1:tiny"
for tag in main new main new; do
  RADIXKV_PREBUILT_LIB="$(lib $tag)" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" > "$OUT/ab_${tag}_$SECONDS.log" 2>&1
  stamp "ab $tag rc=$?"
done
grep -h -E "^(main|new) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
rm -rf "$OUT"/ab_[0-9]*
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_extend_gpu.py tests/test_fp8_gpu.py tests/test_kernel_faults_gpu.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
for tool in memcheck racecheck; do
  [[ -n "$CS" ]] && run_logged "$tool" "$OUT/$tool.txt" 100 "$CS" --tool $tool --print-limit 10 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
    -k "short_context or too_small or more_queries or page_outside"
done
echo "== small"; for f in "$OUT"/small_*.txt; do echo "-- $f"; grep -E "^E=|err|Error" "$f" | head -12; done
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
for tool in memcheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/$tool.txt" | tail -3; done
( cd "$OUT" && tar czf /tmp/s24a.tgz . && rm -rf ./* && mv /tmp/s24a.tgz . )
stamp done
