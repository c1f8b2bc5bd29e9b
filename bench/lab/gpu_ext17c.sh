#!/usr/bin/env bash
# bench/lab/gpu_ext17c.sh -- one H200 call (session 17): extend's grouped steps (two key tiles per
# consumer step) for launches whose max_kv_len exceeds 2048 keys, as a narrow library
# (.carry/var_grp.so) against main's (.carry/var_main.so): the extend GPU tests on the variant
# (cases the narrow build lacks fail as "unsupported"), then bench/kernels_extend.py on both, with
# FlashInfer (fa2 / fa3) in the same process, then both again without it (A/B order main, grp,
# grp, main overall).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext17c /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_grp.so" run_logged tests_grp "$OUT/tests_grp.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
grep -E "^FAILED" "$OUT/tests_grp.txt" | head -40
grep -B3 -E "^E +(AssertionError|assert)" "$OUT/tests_grp.txt" | head -20
i=0
for spec in main: grp: grp:--no-anchors main:--no-anchors; do
  i=$((i + 1))
  tag="${spec%%:*}" extra="${spec#*:}"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "grid_$tag$extra" "$OUT/grid_${i}_$tag.log" 150 \
    python3 bench/kernels_extend.py $extra
  grep -E "^\| " "$OUT/grid_${i}_$tag.log" | tail -19
done
stamp done
