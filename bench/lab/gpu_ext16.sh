#!/usr/bin/env bash
# bench/lab/gpu_ext16.sh -- one H200 call (session 16): extend plans. bench/lab/ext16_plan_ab.py on
# the narrow library of the plan change (.carry/var_plan.so) and, without plans, on main's narrow
# library (.carry/var_main.so), twice in alternation; the extend GPU tests on var_plan; FlashInfer
# fa2 / fa3 on the ragged batches (bench/kernels_extend.py --ragged, var_plan, no plan).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext16 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
for round in 1 2; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_main.so" run_logged "main/$round" "$OUT/ab_main_$round.log" 150 \
    python3 bench/lab/ext16_plan_ab.py --no-plan-only --tag " main/$round"
  grep -E "^\[|MISMATCH" "$OUT/ab_main_$round.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_plan.so" run_logged "plan/$round" "$OUT/ab_plan_$round.log" 200 \
    python3 bench/lab/ext16_plan_ab.py --tag " plan/$round"
  grep -E "^\[|MISMATCH" "$OUT/ab_plan_$round.log"
done
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_plan.so" run_logged ragged "$OUT/ragged.log" 120 \
  python3 bench/kernels_extend.py --ragged
grep -E "^\[ragged" "$OUT/ragged.log"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_plan.so" run_logged tests "$OUT/tests.txt" 200 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_fp8_gpu.py
grep -E "^FAILED|^ERROR" "$OUT/tests.txt" | head -30
stamp done
