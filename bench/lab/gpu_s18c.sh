#!/usr/bin/env bash
# bench/lab/gpu_s18c.sh -- session 18, H200 call 3: FP8 decode on grids of more than one block per
# SM (batches 64 and 256). The product runs them on the 96 KB, 16-key-tile shape (two blocks per
# SM); the lab library .carry/var_wl.so (this checkout's hip/ plus a getenv switch in
# launch_sized, lab only) runs grids whose units average >= RK_LAB_BIG_KEYS keys on the
# one-block-per-SM shapes instead: RK_LAB_BIG=1 the 4-warp x 6-stage one, 2 the 8-warp x 3-stage
# one (32-key tiles both). bench/kernels_fp8.py --no-extend --batches 64,256 per setting.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s18c /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
full="$RADIXKV_PREBUILT_LIB"
wl="$PWD/.carry/var_wl.so"
RADIXKV_PREBUILT_LIB="$wl" RK_LAB_BIG=2 run_logged tests_wl "$OUT/tests_wl.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_fp8_gpu.py -k "decode and not extend and not cuda_core"
grep -E "^FAILED" "$OUT/tests_wl.txt" | grep -v -E "\-(64|256)-|fp16|e5m2|-64-b" | head
i=0
for cfg in main:0:1024 wl:2:1024 wl:1:1024 wl:2:4096 wl:0:1024 main:0:1024; do
  i=$((i + 1))
  tag="${cfg%%:*}" rest="${cfg#*:}"; big="${rest%%:*}" keys="${rest#*:}"
  lib="$full"; [[ $tag == wl ]] && lib="$wl"
  RADIXKV_PREBUILT_LIB="$lib" RK_LAB_BIG="$big" RK_LAB_BIG_KEYS="$keys" run_logged "fp8_${tag}_${big}_$keys" \
    "$OUT/fp8_${i}_${tag}_${big}_$keys.log" 120 \
    python3 bench/kernels_fp8.py --no-extend --batches 64,256 --out "$OUT/fp8_${i}_${tag}_${big}_$keys"
done
( cd "$OUT" && tar czf /tmp/s18c.tgz . && rm -rf ./* && mv /tmp/s18c.tgz . )
stamp done
