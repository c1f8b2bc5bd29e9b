#!/usr/bin/env bash
# bench/lab/gpu_s24d.sh -- session 24, fourth H200 call: the two-CTA extend kernel's start, after
# call 3's stamps (the Q copies' issue holds a CTA ~2.9 µs before tile 0's copies leave, which then
# take 1.3-2.7 µs more). Narrow libraries, each in its own process: both (main), pf (each walker
# prefetches its K and V rows of tiles 0 and 1 into L2 before issuing its Q copies), kfirst (tile
# 0's copies issued before the Q copies), pfk (both changes). (1) ext21_ab.py on P=0 E=128 and,
# with the kernel forced (max_kv_len = 1), on P=0 E=512 and P=1024 E=128; order rotated per round.
# (2) Stamps of pf (probe library). (3) Short-context extend tests on pf.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s24d /tmp/out
lib() { echo "$PWD/.carry/var_$1.so"; }
ab() {  # tag cells [args]
  local tag="$1" cells="$2"; shift 2
  RADIXKV_PREBUILT_LIB="$(lib $tag)" timeout 120 python3 bench/lab/ext21_ab.py --cells "$cells" \
    --tag "$tag" --out "$OUT/abj_$SECONDS" "$@" > "$OUT/log_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag $* rc=$?"
}
for order in "both pf kfirst pfk" "pfk kfirst pf both" "pf both pfk kfirst"; do
  for tag in $order; do ab $tag "1:0:128,16:0:128"; done
done
grep -h -E "^(both|pf|kfirst|pfk) " "$OUT"/log_*.txt | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/res_short.txt"
rm -rf "$OUT"/log_* "$OUT"/abj_*
for order in "both pf kfirst pfk" "pfk kfirst pf both"; do
  for tag in $order; do ab $tag "1:0:512,1:1024:128" --max-kv 1; done
done
grep -h -E "^(both|pf|kfirst|pfk) " "$OUT"/log_*.txt | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/res_forced.txt"
rm -rf "$OUT"/log_* "$OUT"/abj_*
export RADIXKV_PREBUILT_LIB="$(lib pfprobe)"
run_logged stamps "$OUT/stamps.txt" 90 python3 bench/lab/ext24_stamps.py --cells 1:0:128,16:0:128 --out "$OUT/stamps"
export RADIXKV_PREBUILT_LIB="$(lib pf)"
run_logged "short tests (pf)" "$OUT/pytest_pf.txt" 120 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
  -k "(short_context and bf16 and not 64) or too_small or more_queries or (mixed_batch and 128-bf16) or page_outside"
echo "== ab short"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/res_short.txt" | sort
echo "== ab forced (max_kv_len 1)"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/res_forced.txt" | sort
echo "== stamps"; grep -v "^\[" "$OUT/stamps.txt" | grep -v "late CTA" | head -40
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_pf.txt" | tail -1; grep -E "^FAILED" "$OUT/pytest_pf.txt" | head
( cd "$OUT" && tar czf /tmp/s24d.tgz . && rm -rf ./* && mv /tmp/s24d.tgz . )
stamp done
