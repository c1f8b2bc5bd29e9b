#!/usr/bin/env bash
# bench/lab/gpu_s21i.sh -- session 21, last H200 call: the extend NaN-tile test cases added this
# session (test_more_queries_than_keys: d64, d128 in request order, d128 with a plan in rank order)
# on main's full library (6e764ac1aa9b25f5, the library of calls 3 and 4).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21i /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "NaN tests" "$OUT/pytest_nan.txt" 60 python3 -m pytest -q -p no:cacheprovider \
  tests/test_extend_gpu.py -k more_queries -rA
grep -E "PASSED|FAILED|passed|failed" "$OUT/pytest_nan.txt" | tail -5
stamp done
