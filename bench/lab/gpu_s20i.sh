#!/usr/bin/env bash
# bench/lab/gpu_s20i.sh -- session 20, last H200 call, on the full library prebuilt here from the
# final hip/ (the request metadata by ld.global.nc: load_early_ro): the extend GPU tests, the extend
# grid and ragged batches against FlashInfer, the demo on cuda. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20i /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "extend tests" "$OUT/pytest_ext.txt" 90 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py -k extend
grep -E "^FAILED|^ERROR" "$OUT/pytest_ext.txt" | head -10
run_logged grid "$OUT/extend.log" 60 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 60 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s20i.tgz . && rm -rf ./* && mv /tmp/s20i.tgz . )
stamp done
