#!/usr/bin/env bash
# bench/lab/gpu_s23b.sh -- session 23, second H200 call. (1) The per-slot time line of the
# persistent instance with Q through the ring (var_probe: branch ws-qring at its first form plus
# bench/lab/ext23_probe.patch; bench/lab/ext23_stamps.py). (2) A/B, each library in its own process,
# two rounds in rotated order: main; qr (call 1's form); qr2 (the producer's Q rows addressed
# incrementally); qi (the slot ring only: consumers load their own Q rows as on main). (3) The
# extend and fault tests on qr2.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23b /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_probe.so" timeout 120 python3 bench/lab/ext23_stamps.py \
  --cells 1:tiny,1:short,1:0:512,1:1024:512 --out "$OUT/stamps" > "$OUT/stamps.txt" 2>&1
stamp "stamps rc=$?"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_probe.so" timeout 60 python3 bench/lab/ext23_stamps.py \
  --cells 1:0:2048 --max-kv 0 --out "$OUT/stamps" >> "$OUT/stamps.txt" 2>&1
stamp "stamps p0 rc=$?"
ab() {  # tag extra-args...
  local tag="$1"; shift
  local log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${tag%%_*}.so" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" "$@" > "$log" 2>&1
  stamp "ab $tag rc=$?"
}
CELLS="1:0:512,1:1024:128,1:1024:512,16:1024:512,1:fresh,1:short,1:tiny,16:tiny"
for tag in main qr qr2 qi qi qr2 qr main; do ab $tag; done
CELLS="1:0:128,1:0:2048,1:1024:2048"
for tag in main_p0 qr_p0 qr2_p0 qi_p0 qi_p0 qr2_p0 qr_p0 main_p0; do ab $tag --max-kv 0; done
grep -h -E "^(main|qr|qi)" "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qr2.so" run_logged "extend tests qr2" "$OUT/pytest_qr2.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py
rm -rf "$OUT"/ab_[0-9]* "$OUT"/ab_*.log
echo "== stamps"; grep -v "^\[" "$OUT/stamps.txt" | tail -8
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_qr2.txt" | tail -2
grep -E "^FAILED" "$OUT/pytest_qr2.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_qr2.txt")"
stamp done
