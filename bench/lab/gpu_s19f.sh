#!/usr/bin/env bash
# bench/lab/gpu_s19f.sh -- session 19, H200 call 8: FP8 decode with FlashInfer again
# (bench/kernels_fp8.py --no-extend), now with the Triton contiguous read in its read stream.
# One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19f /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged fp8 "$OUT/fp8.log" 150 python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8"
grep -E "read stream|geomean|ps=16 B= 16 L=32768|unavailable" "$OUT/fp8.log" | head -8
( cd "$OUT" && tar czf /tmp/s19f.tgz . && rm -rf ./* && mv /tmp/s19f.tgz . )
stamp done
