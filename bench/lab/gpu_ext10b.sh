#!/usr/bin/env bash
# bench/lab/gpu_ext10b.sh -- one H200 call: A/B of extend_ws versions prebuilt here
# (bench/lab/prebuild_variants.sh: .carry/var_<name>.so): bench/kernels_extend.py on each (the
# first with FlashInfer fa2/fa3), in the order given and then the first again; the extend and FP8
# extend GPU tests on the last; bench/kernels_fp8.py --no-decode on the first and the last.
#   VARIANTS="v0 v1 v3" bash bench/lab/gpu_ext10b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext10b /tmp/out
read -r -a vs <<< "${VARIANTS:-v0 v1 v3}"
first="${vs[0]}" last="${vs[-1]}"
lib() { echo "$PWD/.carry/var_$1.so"; }
for v in "${vs[@]}" "$first"; do
  anchors=(--no-anchors)
  [[ "$v" == "$first" && ! -f "$OUT/$v.log" ]] && anchors=()
  log="$OUT/$v.log"; [[ -f "$log" ]] && log="$OUT/${v}_again.log"
  RADIXKV_PREBUILT_LIB="$(lib "$v")" timeout 100 python3 bench/kernels_extend.py "${anchors[@]}" > "$log" 2>&1
  stamp "extend bench $v rc=$?"; grep -E "^\| " "$log" | tail -19
done
RADIXKV_PREBUILT_LIB="$(lib "$last")" timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py \
  tests/test_fp8_gpu.py -k "extend or opcheck or bad_scales" > "$OUT/tests_$last.txt" 2>&1
stamp "extend + fp8 extend tests ($last) rc=$?: $(tail -1 "$OUT/tests_$last.txt")"; grep -E "^FAILED|^ERROR" "$OUT/tests_$last.txt" | head
for v in "$first" "$last"; do
  RADIXKV_PREBUILT_LIB="$(lib "$v")" timeout 80 python3 bench/kernels_fp8.py --no-decode > "$OUT/fp8_$v.log" 2>&1
  stamp "fp8 extend bench $v rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8_$v.log"
done
stamp done
