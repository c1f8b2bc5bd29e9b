#!/usr/bin/env bash
# bench/lab/gpu_s25c.sh -- prepared in session 25 for branch dec25-merge, run in session 26 (call 1;
# summary: bench/lab/data/s26_call1_ab.txt; no stamps libraries were carried). vD (14c62e1): the merge ticket as one acquire-release atomic, the
# (m, l) loads in one round trip; vE (62496ff): the maximum per head by a shared atomic, one weight
# step per (unit, head), the sums of weights with the output's; vF (d828400): the first tiles' page
# entries requested into L2 beside the plan row, at the entry an even split of a lone request puts them.
# (1) Stamps of vD and vE, with each warp's loop end (bench/lab/dec25_stamps.py), where present.
# (2) A/B of main, vD, vE and vF (narrow libraries, those present), each in its own process, order
# v0 vD vE vF v0 vD vE vF.
# (3) Where the full library of the branch is carried (.carry/radixkv_kernels_sm90.so, built by
# bench/prebuild.sh on the branch): every GPU test file, the new merge stress test included.
# Libraries (here): bash bench/lab/prebuild_variants.sh v0=main vd=14c62e1 ve=62496ff vf=d828400; probes:
# hip/ of a ref through bench/lab/dec25_probe.py, then prebuild_variants.sh pvd=DIR pve=DIR. The
# carry limit (64 MiB) holds the full library, four narrow ones, _core and the tracked files.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s25c /tmp/out
for v in pvd pve; do
  [[ -f .carry/var_$v.so ]] || continue
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$v.so" timeout 100 python3 bench/lab/dec25_stamps.py \
    --cells 1:32768,16:32768 --out "$OUT/stamps_$v" > "$OUT/stamps_$v.txt" 2>&1
  stamp "stamps $v rc=$?"
done
rm -rf "$OUT"/stamps_p*/
for tag in v0 vd ve vf v0 vd ve vf; do
  [[ -f .carry/var_$tag.so ]] || continue
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 150 python3 bench/lab/dec25_ab.py --tag "$tag" \
    --out "$OUT/json_$SECONDS" > "$OUT/ablog_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
rm -rf "$OUT"/json_*
if [[ -f .carry/radixkv_kernels_sm90.so ]]; then
  RADIXKV_FORCE_PREBUILT=1 use_prebuilt_library
  run_logged "GPU tests" "$OUT/pytest_gpu.txt" 300 python3 -m pytest -q -p no:cacheprovider \
    tests/test_kernels_gpu.py tests/test_kernel_faults_gpu.py tests/test_fp8_gpu.py tests/test_decode_plan.py \
    tests/test_extend_gpu.py tests/test_engine.py tests/test_engine_fp8.py tests/test_models_gpu.py \
    tests/test_engine_scale.py tests/test_cli.py tests/test_metadata.py
fi
echo "== stamps"; for v in pvd pve; do [[ -f "$OUT/stamps_$v.txt" ]] && { echo "-- $v"; grep -v "^  head" "$OUT/stamps_$v.txt" | head -48; }; done
echo "== ab"; grep -h -E "^(v0|vd|ve|vf) " "$OUT"/ablog_*.txt | sort -k2,2 -k3,3 -k4,4 -k1,1
grep -h -i -E "error|Traceback" "$OUT"/ablog_*.txt | head -5
echo "== tests"; [[ -f "$OUT/pytest_gpu.txt" ]] && { grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -10; }
stamp done
