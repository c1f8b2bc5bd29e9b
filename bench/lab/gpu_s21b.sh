#!/usr/bin/env bash
# bench/lab/gpu_s21b.sh -- session 21, second H200 call: narrow libraries of main (.carry/var_main.so)
# and of the two-CTA extend kernel with its request metadata in one round trip (.carry/var_ts.so),
# each in its own process, on the short-context cells (bench/lab/ext21_small.py, order main ts
# main ts); then every grid cell of bench/kernels_extend.py on five random page layouts against
# FlashInfer (bench/lab/ext21_layouts.py, main's library). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21b /tmp/out
for e in 128 512; do
  for tag in main ts main ts; do
    RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "small$e $tag" "$OUT/small${e}_$tag.log" 90 \
      python3 bench/lab/ext21_small.py --extend $e --rounds 2 --out "$OUT/small${e}_${tag}_$SECONDS.json"
    grep -E "^E=" "$OUT/small${e}_$tag.log" | sed "s/^/$tag /"
  done
done
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_main.so" run_logged layouts "$OUT/layouts.log" 240 \
  python3 bench/lab/ext21_layouts.py --layouts 5 --out "$OUT/layouts.json"
grep -E "^ps=" "$OUT/layouts.log"
( cd "$OUT" && tar czf /tmp/s21b.tgz . && rm -rf ./* && mv /tmp/s21b.tgz . )
stamp done
