#!/usr/bin/env bash
# bench/lab/gpu_s26b.sh -- for branch dec26-cluster (prepared in session 26, not run): decode plans of
# 2-16 rows launched as thread-block clusters spanning them, split requests merged through
# distributed shared memory, where the occupancy API says every cluster of the grid runs at once
# (else the global merge, and vc times as main). (1) bench/lab/cluster_probe.cu: can 8 clusters of 16
# one-block-per-SM blocks be co-resident, and what a cluster barrier and a DSMEM load cost. (2) A/B main (ve:
# .carry/var_ve.so, 62496ff's narrow library, main's decode kernel) against the branch (vc:
# .carry/var_vc_full.so, bench/prebuild.sh on the branch, copied there), each in its own process,
# order ve vc ve vc, outputs saved and compared bit for bit (the cluster merge sums in the global
# merge's order). (3) Every GPU test file on the branch's library.
# Carry: .carry/var_ve.so .carry/var_vc_full.so .carry/_core.abi3.so (~32 MB).
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s26b /tmp/out
timeout 60 nvcc -arch=sm_90a -O2 -o /tmp/cluster_probe bench/lab/cluster_probe.cu > "$OUT/cluster_probe.txt" 2>&1 \
  && timeout 30 /tmp/cluster_probe >> "$OUT/cluster_probe.txt" 2>&1
stamp "cluster probe rc=$?"; cat "$OUT/cluster_probe.txt"
for tag in ve vc ve vc; do
  lib="$PWD/.carry/var_$tag.so"; [[ $tag == vc ]] && lib="$PWD/.carry/var_vc_full.so"
  [[ -f "$lib" ]] || continue
  RADIXKV_PREBUILT_LIB="$lib" timeout 150 python3 bench/lab/dec25_ab.py --tag "$tag" --out "$OUT/json_$SECONDS" \
    --dump /tmp/dump_$tag > "$OUT/ablog_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
python3 - <<'PY' > "$OUT/bits.txt" 2>&1
import glob, os, torch
same = diff = 0
for f in sorted(glob.glob("/tmp/dump_ve/*.pt")):
    g = f.replace("/dump_ve/ve_", "/dump_vc/vc_")
    if not os.path.exists(g):
        continue
    a, b = torch.load(f), torch.load(g)
    if torch.equal(a, b):
        same += 1
    else:
        diff += 1
        print("differs:", os.path.basename(f), float((a.float() - b.float()).abs().max()))
print(f"outputs bit-equal in {same} cells, different in {diff}")
PY
cat "$OUT/bits.txt"
if [[ -f .carry/var_vc_full.so ]]; then
  export RADIXKV_PREBUILT_LIB="$PWD/.carry/var_vc_full.so" RADIXKV_BUILD_DIR=/tmp/radixkv-build
  run_logged "GPU tests" "$OUT/pytest_gpu.txt" 300 python3 -m pytest -q -p no:cacheprovider \
    tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
    tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
    tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
fi
rm -rf "$OUT"/json_*
echo "== ab"; grep -h -E "^(ve|vc) " "$OUT"/ablog_*.txt | sort -k2,2 -k3,3 -k4,4 -k1,1
grep -h -i -E "error|Traceback" "$OUT"/ablog_*.txt | head -5
echo "== tests"; [[ -f "$OUT/pytest_gpu.txt" ]] && { grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10; }
( cd "$OUT" && tar czf /tmp/s26b.tgz . && rm -rf ./* && mv /tmp/s26b.tgz . )
stamp done
