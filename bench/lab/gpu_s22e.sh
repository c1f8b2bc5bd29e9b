#!/usr/bin/env bash
# bench/lab/gpu_s22e.sh -- session 22, fifth H200 call, on the full library prebuilt here from the
# final hip/ (the short-context kernel up to 128 keys with a 16-bit cache, 256 with FP8): every GPU
# test file; the extend grid and ragged batches (now with "tiny", 16-256 new tokens) against
# FlashInfer; the ragged "tiny" and "short" batches as the op picks their kernel against the
# short-context kernel forced (max_kv_len = 1), each in its own process, twice; the demo on cuda;
# memcheck over the extend tests. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22e /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 200 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
run_logged grid "$OUT/extend.log" 100 python3 bench/kernels_extend.py --out "$OUT/ext"
grep -E "^\| " "$OUT/extend.log" | tail -19
run_logged ragged "$OUT/ragged.log" 60 python3 bench/kernels_extend.py --ragged --out "$OUT/extr"
grep -E "^\[ragged" "$OUT/ragged.log"
CELLS="1:tiny,16:tiny,1:short,16:short"
for round in 1 2; do
  for spec in op: two:--max-kv=1; do
    IFS=: read -r tag flag <<< "$spec"
    log="$OUT/ab_${tag}_$round.log"
    timeout 60 python3 bench/lab/ext21_ab.py --cells "$CELLS" --tag "$tag" $flag --out "$OUT/ab_${tag}_$round" > "$log" 2>&1
    stamp "ab $tag rc=$?"
    grep -E "^$tag " "$log" | awk '{print $2, $3}' | tr '\n' ';'; echo
  done
done
run_logged demo "$OUT/demo.txt" 60 python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [[ -n "$SAN" ]]; then
  run_logged "memcheck extend" "$OUT/memcheck_extend.txt" 150 "$SAN" --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
  grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck_extend.txt" | head -4
fi
rm -f "$OUT"/*/*.png
( cd "$OUT" && tar czf /tmp/s22e.tgz . && rm -rf ./* && mv /tmp/s22e.tgz . )
stamp done
