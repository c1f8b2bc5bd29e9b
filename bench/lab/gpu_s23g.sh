#!/usr/bin/env bash
# bench/lab/gpu_s23g.sh -- session 23, seventh H200 call: gpu_s23f.sh's checks without its A/B, on
# the full library after the pair-step instance's bar_q_free became an arrival per consumer thread
# (call 6's racecheck flagged the Q tile's reads against the 7th stage's copies when one lane per
# warp arrived). Every GPU test file; memcheck / synccheck / racecheck over the extend tests of
# persistent CTAs, plans and pair steps; the extend grid and ragged batches with FlashInfer; the
# demo on cuda.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23g /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "GPU tests" "$OUT/pytest_gpu.txt" 240 python3 -m pytest -q -p no:cacheprovider \
  tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
  tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
  tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
for tool in memcheck synccheck; do
  [[ -n "$CS" ]] && run_logged "$tool" "$OUT/$tool.txt" 120 "$CS" --tool $tool --print-limit 10 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
    -k "persistent_ctas or more_queries or bad_plan or plan_order or pair_steps or rank_order"
done
run_logged "grid" "$OUT/grid.txt" 150 python3 bench/kernels_extend.py --out "$OUT/results"
run_logged "ragged" "$OUT/ragged.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/results"
run_logged demo "$OUT/demo.txt" 90 python3 -m radixkv demo --device cuda --json "$OUT/results/demo_cuda.json"
[[ -n "$CS" ]] && run_logged racecheck "$OUT/racecheck.txt" 100 "$CS" --tool racecheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k "pair_steps or persistent_ctas"
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10
for tool in memcheck synccheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/$tool.txt" | tail -3; grep -c "Race reported" "$OUT/$tool.txt"; done
echo "== grid"; tail -21 "$OUT/grid.txt"
echo "== ragged"; grep "ragged extend" "$OUT/ragged.txt"
echo "== demo"; grep -i -E "equal|verify|tokens" "$OUT/demo.txt" | head -4
rm -f "$OUT"/results/*.png; ( cd "$OUT" && tar czf /tmp/s23g.tgz . && rm -rf ./* && mv /tmp/s23g.tgz . )
stamp done
