#!/usr/bin/env bash
# bench/lab/gpu_s24b.sh -- session 24, second H200 call: less code in the two-CTA extend kernel
# (narrow libraries, each in its own process; roll alone did not fit the carry). one: dense and masked tiles share one loop body;
# roll: the Q copy loop rolled (position / head advanced without a division) and the epilogue's
# store loop unrolled by 2 instead of 8; both: one + roll. (1) ext21_ab.py on P=0 E=128 (the cells
# this kernel runs on sm_90a) and, with max_kv_len = 1 (this kernel forced), on longer cells; order
# rotated per round. (2) ext21_small.py (radixkv / fa2 / fa3) for main and both. (3) The extend GPU
# tests and memcheck on the narrow library of both (variants it lacks fail as unsupported).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s24b /tmp/out
lib() { echo "$PWD/.carry/var_$1.so"; }
ab() {  # tag cells [--max-kv N]
  local tag="$1" cells="$2"; shift 2
  RADIXKV_PREBUILT_LIB="$(lib $tag)" timeout 120 python3 bench/lab/ext21_ab.py --cells "$cells" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" "$@" > "$OUT/ab_${tag}_$SECONDS.log" 2>&1
  stamp "ab $tag $* rc=$?"
}
for order in "main one both" "both one main" "one main both"; do
  for tag in $order; do ab $tag "1:0:128,16:0:128"; done
done
grep -h -E "^(main|one|both) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_short.txt"
rm -rf "$OUT"/ab_*
for order in "main both one" "one both main"; do
  for tag in $order; do ab $tag "1:0:512,1:1024:128,1:short" --max-kv 1; done
done
grep -h -E "^(main|one|both) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_forced.txt"
rm -rf "$OUT"/ab_*
for tag in main both main both; do
  RADIXKV_PREBUILT_LIB="$(lib $tag)" timeout 150 python3 bench/lab/ext21_small.py --rounds 2 \
    > "$OUT/small_${tag}_$SECONDS.txt" 2>&1
  stamp "small $tag rc=$?"
done
export RADIXKV_PREBUILT_LIB="$(lib both)"
run_logged "extend tests (both, narrow)" "$OUT/pytest_both.txt" 150 python3 -m pytest -q -p no:cacheprovider \
  tests/test_extend_gpu.py tests/test_fp8_gpu.py -k "extend or short or mixed or plan or rank or pair or more_queries"
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
[[ -n "$CS" ]] && run_logged memcheck "$OUT/memcheck.txt" 100 "$CS" --tool memcheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
  -k "short_context or too_small or more_queries or page_outside"
echo "== ab short"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_short.txt" | sort
echo "== ab forced (max_kv_len 1)"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_forced.txt" | sort
echo "== small"; for f in "$OUT"/small_*.txt; do echo "-- $f"; grep -E "^E=|Error" "$f" | head -6; done
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_both.txt" | tail -1
grep -E "^FAILED" "$OUT/pytest_both.txt" | sed 's/ - .*//' | head -60 | tr '\n' ' '; echo
grep -E "^E  " "$OUT/pytest_both.txt" | sort | uniq -c | sort -rn | head -8
echo "== memcheck"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.txt" | tail -3
( cd "$OUT" && tar czf /tmp/s24b.tgz . && rm -rf ./* && mv /tmp/s24b.tgz . )
stamp done
