#!/usr/bin/env bash
# bench/lab/gpu_ext15b.sh -- one H200 call (session 15): the full library of bench/prebuild.sh with
# max_kv_len's kernel choice: GPU tests (TESTS, default the extend, FP8 extend, kernel-log and
# engine tests), the short cells of bench/lab/ext15_small.py with and without the bound (twice, in
# alternation), bench/kernels_extend.py's grid with FlashInfer fa2/fa3, and FP8 vs bf16 extend.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_ext15b /tmp/out
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
read -r -a tests <<< "${TESTS:-tests/test_extend_gpu.py tests/test_fp8_gpu.py tests/test_kernels_gpu.py tests/test_engine.py}"
timeout 330 python3 -m pytest -q -p no:cacheprovider "${tests[@]}" > "$OUT/tests.txt" 2>&1
stamp "tests rc=$?: $(tail -1 "$OUT/tests.txt")"
grep -E "^FAILED|^ERROR" "$OUT/tests.txt" | head -20
cells="${CELLS:-1:0:128,1:0:512,1:256:128,1:512:128,16:0:128,16:0:512,16:256:128,16:512:128}"
for round in 1 2; do
  for hint in "" --max-kv; do
    tag="$([[ -n "$hint" ]] && echo bound || echo nobound)/$round"
    timeout 100 python3 bench/lab/ext15_small.py --cells "$cells" --tag "$tag" $hint > "$OUT/small_${tag%/*}_$round.log" 2>&1
    stamp "small cells $tag rc=$?"; grep -E "^\[" "$OUT/small_${tag%/*}_$round.log" || tail -5 "$OUT/small_${tag%/*}_$round.log"
  done
done
timeout 150 python3 bench/kernels_extend.py --out "$OUT" > "$OUT/extend.log" 2>&1
stamp "kernels_extend rc=$?"; grep -E "^\| " "$OUT/extend.log" | tail -19
timeout 100 python3 bench/kernels_fp8.py --no-decode --out "$OUT" > "$OUT/fp8.log" 2>&1
stamp "fp8 extend rc=$?"; grep -E "^\[fp8 extend\]|fp8 extend:" "$OUT/fp8.log"
stamp done
