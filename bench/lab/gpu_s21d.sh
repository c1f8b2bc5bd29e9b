#!/usr/bin/env bash
# bench/lab/gpu_s21d.sh -- session 21, fourth H200 call: compute-sanitizer memcheck over the extend
# fault tests (bad metadata, page ids, plans) and the extend tests, on the full library prebuilt here
# from the final hip/. Each pass has its own time limit; what ran is in the logs.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s21d /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
[[ -n "$SAN" ]] || { echo "no compute-sanitizer"; exit 1; }
run_logged "memcheck faults" "$OUT/memcheck_faults.txt" 200 "$SAN" --tool memcheck --error-exitcode 9 \
  --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_kernel_faults_gpu.py -k extend
grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_faults.txt" | head -8
run_logged "memcheck extend" "$OUT/memcheck_extend.txt" 300 "$SAN" --tool memcheck --error-exitcode 9 \
  --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_extend.txt" | head -8
stamp done
