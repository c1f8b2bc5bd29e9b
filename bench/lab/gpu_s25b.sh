#!/usr/bin/env bash
# bench/lab/gpu_s25b.sh -- session 25, second H200 call: the split merge's (m, l) loads in one round
# trip (vC), and the ticket as one acquire-release atomic instead of every thread's fences (vD).
# (1) Stamps (bench/lab/dec25_stamps.py, with the merge's own phases) of main, vC and vD.
# (2) A/B of main, vC and vD (narrow libraries), each in its own process, order v0 vC vD v0 vC vD.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s25b /tmp/out
for v in pv0 pvc pvd; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$v.so" timeout 100 python3 bench/lab/dec25_stamps.py \
    --cells 1:32768,16:32768 --out "$OUT/stamps_$v" > "$OUT/stamps_$v.txt" 2>&1
  stamp "stamps $v rc=$?"
done
rm -rf "$OUT"/stamps_p*/
for tag in v0 vc vd v0 vc vd; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 150 python3 bench/lab/dec25_ab.py --tag "$tag" \
    --out "$OUT/json_$SECONDS" > "$OUT/ablog_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
rm -rf "$OUT"/json_*
echo "== stamps"; for v in pv0 pvc pvd; do echo "-- $v"; grep -v "^  head" "$OUT/stamps_$v.txt" | head -40; done
echo "== ab"; grep -h -E "^(v0|vc|vd) " "$OUT"/ablog_*.txt | sort -k2,2 -k3,3 -k4,4 -k1,1
grep -h -i -E "error|Traceback" "$OUT"/ablog_*.txt | head -5
stamp done
