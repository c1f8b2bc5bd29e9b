#!/usr/bin/env bash
# bench/lab/gpu_s19a.sh -- session 19, H200 call 1, main's full library (prebuilt here): decode time
# against units per request (bench/lab/plan_sweep.py). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19a /tmp/out
# The carried library is 251f349's; hip/ differs from it only in comments since.
export RADIXKV_FORCE_PREBUILT=1
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged sweep "$OUT/sweep.log" 420 python3 bench/lab/plan_sweep.py --out "$OUT"
cat "$OUT/sweep.log"
( cd "$OUT" && tar czf /tmp/s19a.tgz . && rm -rf ./* && mv /tmp/s19a.tgz . )
stamp done
