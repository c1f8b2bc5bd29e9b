#!/usr/bin/env bash
# bench/lab/gpu_ext16b.sh -- one H200 call (session 16): the plan orders of bench/lab/ext16_plan_ab.py
# (ORDERS) on the plan change's narrow library (.carry/var_plan.so), each timed twice, interleaved.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext16b /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_plan.so" run_logged orders "$OUT/orders.log" 400 \
  python3 bench/lab/ext16_plan_ab.py --orders "${ORDERS:-req,lpt,lpt8,runs1,runs2,runs4}" --tag " orders"
grep -E "^\[|MISMATCH" "$OUT/orders.log"
stamp done
