#!/usr/bin/env bash
# bench/lab/gpu_ext14.sh -- one H200 call (session 14): A/B of extend_ws versions prebuilt here by
# bench/lab/prebuild_variants.sh (.carry/var_<name>.so): bench/kernels_extend.py on each in the order
# given, twice, the first run with FlashInfer fa2/fa3; bench/kernels_fp8.py --no-decode
# (FP8 vs bf16 extend) on FP8_VARIANTS (default: all); the extend and FP8 extend GPU tests on the last.
#   VARIANTS="v0 v1 v2 v3" FP8_VARIANTS="v0 v2 v3" bash bench/lab/gpu_ext14.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext14 /tmp/out
python3 -c "import pytest; print('pytest', pytest.__version__)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
read -r -a vs <<< "${VARIANTS:-v0 v1 v2}"
first="${vs[0]}" last="${vs[-1]}"
# "full": the full library of bench/prebuild.sh.
lib() { if [[ "$1" == full ]]; then echo "$PWD/.carry/radixkv_kernels_sm90.so"; else echo "$PWD/.carry/var_$1.so"; fi; }
# Every variant twice (order v0 v1 .. v0 v1 ..), FlashInfer in the first run only.
round=0
for v in "${vs[@]}" "${vs[@]}"; do
  anchors=(--no-anchors)
  [[ "$v" == "$first" && $round == 0 ]] && anchors=()
  [[ "$v" == "$first" ]] && round=$((round + 1))
  log="$OUT/${v}_$round.log"
  RADIXKV_PREBUILT_LIB="$(lib "$v")" timeout 100 python3 bench/kernels_extend.py "${anchors[@]}" > "$log" 2>&1
  stamp "extend bench $v round $round rc=$?"; grep -E "^\| " "$log" | tail -19
done
read -r -a fvs <<< "${FP8_VARIANTS-${vs[*]}}"  # empty: none
for v in "${fvs[@]}"; do
  RADIXKV_PREBUILT_LIB="$(lib "$v")" timeout 80 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8_$v.log" 2>&1
  stamp "fp8 extend bench $v rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8_$v.log"
done
# TESTS=all: every GPU test file (a full library), else the extend and FP8 extend tests.
if [[ "${TESTS:-extend}" == all ]]; then
  tests=(tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py
    tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py
    tests/test_engine_scale.py tests/test_cli.py)
else
  tests=(tests/test_extend_gpu.py tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales")
fi
RADIXKV_PREBUILT_LIB="$(lib "$last")" timeout 300 python3 -m pytest -q -p no:cacheprovider "${tests[@]}" > "$OUT/tests_$last.txt" 2>&1
stamp "tests ($last, ${TESTS:-extend}) rc=$?: $(tail -1 "$OUT/tests_$last.txt")"
grep -E "^FAILED|^ERROR" "$OUT/tests_$last.txt" | grep -v -i "unsupported" | head -20
# MUTANT=<name>: the long-prefix extend tests on .carry/var_<name>.so, a build with a planted bug
# (they must fail there).
if [[ -n "${MUTANT:-}" ]]; then
  RADIXKV_PREBUILT_LIB="$(lib "$MUTANT")" timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
    -k "long_prefix and bf16 and not 64" > "$OUT/tests_mutant_$MUTANT.txt" 2>&1
  stamp "long-prefix tests on the mutant $MUTANT rc=$? (must fail): $(tail -1 "$OUT/tests_mutant_$MUTANT.txt")"
  grep -E "^E  " "$OUT/tests_mutant_$MUTANT.txt" | head -6
fi
stamp done
