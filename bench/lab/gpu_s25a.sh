#!/usr/bin/env bash
# bench/lab/gpu_s25a.sh -- session 25, first H200 call: where B=1 decode's time goes after the loop.
# (1) Per-block stamps (bench/lab/dec25_stamps.py) of main's kernel and of the compact merge.
# (2) A/B of main (narrow library) and the compact merge (full library), each in its own process,
# order v0 vA v0 vA (bench/lab/dec25_ab.py: B=1 cells beside a same-size read, fp32 reference).
# (3) The decode GPU test files on the compact merge's full library.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s25a /tmp/out
RADIXKV_FORCE_PREBUILT=1 use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
NEW="$RADIXKV_PREBUILT_LIB"
for v in pv0 pva; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$v.so" timeout 100 python3 bench/lab/dec25_stamps.py \
    --out "$OUT/stamps_$v" > "$OUT/stamps_$v.txt" 2>&1
  stamp "stamps $v rc=$?"
done
for tag in v0 vA v0 vA; do
  lib="$NEW"; [[ $tag == v0 ]] && lib="$PWD/.carry/var_v0.so"
  RADIXKV_PREBUILT_LIB="$lib" timeout 150 python3 bench/lab/dec25_ab.py --tag "$tag" \
    --out "$OUT/ab_json_$SECONDS" > "$OUT/ablog_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
run_logged "decode GPU tests" "$OUT/pytest_gpu.txt" 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py
echo "== stamps"; for v in pv0 pva; do echo "-- $v"; grep -v "^  head" "$OUT/stamps_$v.txt" | head -40; done
echo "== ab"; grep -h -E "^(v0|vA) " "$OUT"/ablog_*.txt | sort -k2,2 -k3,3 -k4,4 -k1,1
grep -h -i -E "error|Traceback" "$OUT"/ablog_*.txt | head -5
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
stamp done
