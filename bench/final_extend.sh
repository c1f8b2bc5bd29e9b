#!/usr/bin/env bash
# One GPU-machine run that (1) times candidate variants of extend_attention on a few cells,
# (2) picks the fastest (geometric mean), (3) runs the GPU test suite on that exact build and
# (4) runs the full benchmark (with FlashInfer fa2/fa3) on it. The chosen -D flags are written to
# OUT/best.txt; make them the defaults in hip/extend_attention.cu afterwards.
#
# usage: bash bench/final_extend.sh OUT_DIR "name=-DFLAG=1,-DFLAG2=2" ...
set -uo pipefail
out="$1"; shift
logs=/tmp/extend_tune
mkdir -p "$out" "$logs"
CELLS="${CELLS:-16:4096:512,16:0:2048,1:1024:512}" REPS="${REPS:-10}" NO_ANCHORS=1 \
  bash bench/tune_extend.sh "$logs" "$@" 2>&1 | tee "$out/tune.log"
python3 - "$logs" "$out/best.txt" "$@" <<'PY'
import math, re, sys
logs, best_path, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
scores = {}
for v in variants:
    name, _, flags = v.partition("=")
    try:
        times = [float(m) for m in re.findall(r"radixkv\s+([0-9.]+) us", open(f"{logs}/tune_{name}.log").read())]
    except OSError:
        continue
    if times:
        scores[name] = (math.exp(sum(map(math.log, times)) / len(times)), flags)
best = min(scores, key=lambda n: scores[n][0])
for n, (t, _) in sorted(scores.items(), key=lambda kv: kv[1][0]):
    print(f"  {n:14s} geomean {t:8.1f} us")
print(f"best: {best} {scores[best][1]}")
open(best_path, "w").write(f"{best}\n{scores[best][1]}\n")
PY
flags="$(sed -n 2p "$out/best.txt")"
rm -rf /tmp/hipbest && mkdir -p /tmp/hipbest && cp hip/*.h hip/extend_attention.cu hip/extend_binding.cpp /tmp/hipbest/
defs=""
IFS=',' read -ra fl <<<"$flags"
for f in "${fl[@]}"; do
  [[ -z "$f" ]] && continue
  kv="${f#-D}"; defs+="#define ${kv%%=*} ${kv#*=}"$'\n'
done
printf '%s' "$defs" | cat - hip/extend_attention.cu >/tmp/hipbest/extend_attention.cu
echo "--- build defines:"; printf '%s' "$defs"
export RADIXKV_HIP_DIR=/tmp/hipbest RADIXKV_BUILD_DIR=/tmp/rkbest
PYTHONPATH=python timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py 2>&1 |
  tee "$out/test.log" | tail -3
timeout 240 python3 bench/kernels_extend.py --out "$out" --reps 20 2>&1 | tee "$out/bench.log" | tail -22
