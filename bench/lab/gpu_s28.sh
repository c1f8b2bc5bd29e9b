#!/usr/bin/env bash
# bench/lab/gpu_s28.sh -- session 28: main's decode measured end to end after session 26's merge
# change, for bench/results and the README (one call, ~6-8 min). Carry: .carry/xz (main.so.xz:
# bench/prebuild.sh's library of main, hash in .carry/radixkv_kernels_sm90.hash; v0.so.xz:
# 8535d16's narrow library, main before the merge change), .carry/radixkv_kernels_sm90.hash,
# .carry/_core.abi3.so, .anchors. The libraries travel xz-compressed (the tree's 64 MiB limit).
# (1) every GPU test file on main's library; (2) bench/kernels.py --ragged in full (uniform cells
# with the split sweep and the write column, ragged cells, FlashInfer in the same process) ->
# results/; (3) FP8 decode (bench/kernels_fp8.py --no-extend) on main, then on v0; (4) the demo
# on cuda. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
xz -dc .carry/xz/main.so.xz > .carry/radixkv_kernels_sm90.so || exit 1
xz -dc .carry/xz/v0.so.xz > .carry/var_v0.so || exit 1
source bench/gpu_env.sh
gpu_begin gpu_s28 /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
main_lib="$RADIXKV_PREBUILT_LIB" old_lib="$PWD/.carry/var_v0.so"
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
run_logged "decode (full)" "$OUT/decode.log" 200 python3 bench/kernels.py --ragged --no-extend --out "$OUT/results"
grep -E "geomean|B=1 L=32768|ragged" "$OUT/decode.log" | head -12
for t in main old; do
  lib="$main_lib"; [[ $t == old ]] && lib="$old_lib"
  (( SECONDS - _rk_t0 < 420 )) || break
  RADIXKV_PREBUILT_LIB="$lib" run_logged "fp8 $t" "$OUT/fp8_$t.log" 120 \
    python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8_$t"
  grep -E "geomean|worst" "$OUT/fp8_$t.log" | head -4
done
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/results/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
( cd "$OUT" && tar czf /tmp/s28.tgz . && rm -rf ./* && mv /tmp/s28.tgz . )
stamp done
