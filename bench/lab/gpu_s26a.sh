#!/usr/bin/env bash
# bench/lab/gpu_s26a.sh -- prepared in session 26 for its second H200 call, NOT YET RUN (no device was
# lent for it): main after the split-merge change (vD + vE of dec25-merge; vF was taken out in the
# session's review) against the main before it, on bench/kernels.py's decode cells (uniform +
# ragged, FlashInfer and the read stream in the same process). Old: the narrow library of 8535d16's
# hip/ (.carry/var_v0.so: D = 128, bf16, pages 1/16, e4m3; bench/lab/prebuild_variants.sh v0=8535d16).
# New: the full library of main (bench/prebuild.sh). Carry: .carry/var_v0.so .carry/radixkv_kernels_sm90.so
# .carry/radixkv_kernels_sm90.hash .carry/_core.abi3.so .anchors (~57 MB). Order new old new old, then
# bench/decode_compare.py on the second pair; the demo on cuda and FP8 decode (old, new) while time
# is left. First, bench/lab/cluster_probe.cu (~10 s). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s26a /tmp/out
# Thread-block clusters for the split merge? (bench/lab/cluster_probe.cu: co-residency of 8
# clusters of 16 one-block-per-SM blocks, cluster barrier and DSMEM latencies)
timeout 60 nvcc -arch=sm_90a -O2 -o /tmp/cluster_probe bench/lab/cluster_probe.cu > "$OUT/cluster_probe.txt" 2>&1 \
  && timeout 30 /tmp/cluster_probe >> "$OUT/cluster_probe.txt" 2>&1
stamp "cluster probe rc=$?"; cat "$OUT/cluster_probe.txt"
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
new_lib="$RADIXKV_PREBUILT_LIB" old_lib="$PWD/.carry/var_v0.so"
dec() {  # tag lib out
  RADIXKV_PREBUILT_LIB="$2" run_logged "decode $1" "$OUT/decode_$1_$SECONDS.log" 150 \
    python3 bench/kernels.py --ragged --no-sweep --no-write-column --no-extend --out "$3"
}
dec new "$new_lib" "$OUT/r1/new"
dec old "$old_lib" "$OUT/r1/old"
dec new "$new_lib" "$OUT/r2/new"
dec old "$old_lib" "$OUT/r2/old"
for r in r1 r2; do python3 bench/decode_compare.py "$OUT/$r" > "$OUT/compare_$r.txt" 2>&1; done
echo "== compare r2"; cat "$OUT/compare_r2.txt"
echo "== compare r1 (summary)"; tail -3 "$OUT/compare_r1.txt"
RADIXKV_PREBUILT_LIB="$new_lib" run_logged demo "$OUT/demo.txt" 90 \
  python3 -m radixkv demo --device cuda --json "$OUT/demo_cuda.json"
grep -A1 "verify" "$OUT/demo.txt" | head -2
if (( SECONDS - _rk_t0 < 360 )); then
  for t in new old; do
    lib="$new_lib"; [[ $t == old ]] && lib="$old_lib"
    RADIXKV_PREBUILT_LIB="$lib" run_logged "fp8 $t" "$OUT/fp8_$t.log" 120 \
      python3 bench/kernels_fp8.py --no-extend --out "$OUT/fp8_$t"
    grep -E "geomean|worst" "$OUT/fp8_$t.log" | head -4
  done
fi
rm -f "$OUT"/*/*.png "$OUT"/*/*/*.png
( cd "$OUT" && tar czf /tmp/s26a.tgz . && rm -rf ./* && mv /tmp/s26a.tgz . )
stamp done
