#!/usr/bin/env bash
# bench/lab/gpu_ext15.sh -- one H200 call (session 15): the extend GPU tests on the full library,
# then the short-KV cells of bench/lab/ext15_small.py (bf16 and FP8 caches) on each narrow library
# of VARIANTS (.carry/var_<name>.so, "full" = bench/prebuild.sh's), twice in alternation, and
# bench/kernels_extend.py on the same cells with FlashInfer fa2/fa3 once (the first variant).
#   VARIANTS="v0 nows" CELLS=1:0:128,... HINT_VARIANTS="..." bash bench/lab/gpu_ext15.sh
# HINT_VARIANTS: variants whose runs pass max_kv_len (--max-kv).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext15 /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
lib() { if [[ "$1" == full ]]; then echo "$PWD/.carry/radixkv_kernels_sm90.so"; else echo "$PWD/.carry/var_$1.so"; fi; }
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  RADIXKV_PREBUILT_LIB="$(lib full)" timeout 300 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_extend_gpu.py} \
    > "$OUT/tests_full.txt" 2>&1
  stamp "tests (full) rc=$?: $(tail -1 "$OUT/tests_full.txt")"
  grep -E "^FAILED|^ERROR" "$OUT/tests_full.txt" | head -20
fi
read -r -a vs <<< "${VARIANTS:-v0 nows}"
cells="${CELLS:-1:0:128,16:0:128}"
for round in 1 2; do
  for v in "${vs[@]}"; do
    hint=()
    [[ " ${HINT_VARIANTS:-} " == *" $v "* ]] && hint=(--max-kv)
    RADIXKV_PREBUILT_LIB="$(lib "$v")" timeout 150 python3 bench/lab/ext15_small.py --cells "$cells" --tag "$v/$round" \
      "${hint[@]}" > "$OUT/small_${v}_$round.log" 2>&1
    stamp "small cells $v round $round rc=$?"; grep -E "^\[" "$OUT/small_${v}_$round.log" || tail -5 "$OUT/small_${v}_$round.log"
  done
done
RADIXKV_PREBUILT_LIB="$(lib "${vs[0]}")" timeout 200 python3 bench/kernels_extend.py --cells "$cells" > "$OUT/anchors.log" 2>&1
stamp "kernels_extend with anchors (${vs[0]}) rc=$?"; grep -E "^\| " "$OUT/anchors.log" | tail -40
stamp done
