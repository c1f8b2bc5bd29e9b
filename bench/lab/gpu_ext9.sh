#!/usr/bin/env bash
# bench/lab/gpu_ext9.sh -- one H200 call for the FP8 producer's conversion in extend_ws (session 9):
# (a) this checkout (whole byte stage read into registers, FP8 register split 72/216): a build of
#     D = 128, pages 1/16 (every dtype), the FP8 extend and extend GPU tests, the FP8 extend bench;
# (b) bench/lab/ext9_halves.patch (one half at a time, 56/224) and (c) bench/lab/ext9_hwcvt.patch
#     (on top of (a): cvt.rn.f16x2.e4m3x2 + f32 -> bf16x2) narrowed to bf16 + e4m3, the FP8
#     extend bench each; (c) also runs the FP8 extend tests.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext9 /tmp/out
export RADIXKV_HEAD_DIMS=128 RADIXKV_PAGE_SIZES=1,16 MAX_JOBS=16
RADIXKV_BUILD_DIR=/tmp/rkb_B build_kernels "$OUT/build_B.txt" 300 || exit 1
export RADIXKV_BUILD_DIR=/tmp/rkb_B
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales" \
  > "$OUT/fp8_tests_B.txt" 2>&1
stamp "B fp8 extend tests rc=$?: $(tail -1 "$OUT/fp8_tests_B.txt")"
grep -E "^FAILED|^ERROR|Error|assert" "$OUT/fp8_tests_B.txt" | head -10
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_extend_gpu.py > "$OUT/ext_tests_B.txt" 2>&1
stamp "B extend tests rc=$?: $(tail -1 "$OUT/ext_tests_B.txt")"; grep -E "^FAILED|^ERROR" "$OUT/ext_tests_B.txt" | head
timeout 100 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext_B.log" 2>&1
stamp "B fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext_B.log"

export RADIXKV_DTYPES=bf16 RADIXKV_KV_DTYPES=e4m3
mkdir -p /tmp/hip_B && cp hip/extend_ws.cuh hip/extend_attention_kernel.cuh /tmp/hip_B/
for v in halves hwcvt; do
  cp /tmp/hip_B/* hip/
  patch -s -p1 < "bench/lab/ext9_$v.patch" || { stamp "$v: patch failed"; continue; }
  RADIXKV_BUILD_DIR=/tmp/rkb_$v build_kernels "$OUT/build_$v.txt" 200 || continue
  export RADIXKV_BUILD_DIR=/tmp/rkb_$v
  if [[ $v == hwcvt ]]; then
    timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_fp8_gpu.py -k "extend" > "$OUT/fp8_tests_$v.txt" 2>&1
    stamp "$v fp8 extend tests rc=$?: $(tail -1 "$OUT/fp8_tests_$v.txt")"
  fi
  timeout 100 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8ext_$v.log" 2>&1
  stamp "$v fp8 extend bench rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8ext_$v.log"
done
cp /tmp/hip_B/* hip/
stamp done
