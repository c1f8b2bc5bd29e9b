#!/usr/bin/env bash
# bench/lab/gpu_s23a.sh -- session 23, first H200 call: branch ws-qring (the persistent extend_ws
# instance takes each slot's resolution and Q from its producer: a slot ring in shared memory and a
# stage of the K/V ring) against main, narrow libraries .carry/var_main.so and .carry/var_qr.so.
# The extend and fault tests on qr; then each library in its own process, order main qr main qr,
# on the 18 grid cells and the ragged batches (bench/lab/ext21_ab.py: median time and output
# digest per cell), then the same with max_kv_len = 0 (every rank-order launch persistent) on the
# cells that otherwise run the pair-step instance or the two-CTA kernel; the ragged and grid
# benchmarks with FlashInfer on qr.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23a /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qr.so" run_logged "extend tests qr" "$OUT/pytest_qr.txt" 120 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py
grep -E "passed|failed" "$OUT/pytest_qr.txt" | tail -2
grep -E "^FAILED" "$OUT/pytest_qr.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_qr.txt")"
ab() {  # tag extra-args...
  local tag="$1"; shift
  local log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${tag%%_*}.so" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" "$@" > "$log" 2>&1
  stamp "ab $tag rc=$?"
}
CELLS="1:0:128,16:0:128,1:0:512,16:0:512,1:0:2048,16:0:2048,1:1024:128,16:1024:128,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048,1:chunked,1:multi-turn,1:fresh,16:fresh,1:short,1:tiny,16:tiny"
for tag in main qr main qr; do ab $tag; done
CELLS="1:0:128,16:0:128,1:0:2048,16:0:2048,1:1024:2048,16:1024:2048,1:4096:2048,16:4096:2048,1:chunked,1:multi-turn"
for tag in main_p0 qr_p0 main_p0 qr_p0; do ab $tag --max-kv 0; done
grep -h -E "^(main|qr)" "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
cat "$OUT/ab_all.txt"
export RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qr.so"
run_logged "ragged qr" "$OUT/ragged_qr.txt" 120 python3 bench/kernels_extend.py --ragged --out "$OUT/ragged_qr"
tail -14 "$OUT/ragged_qr.txt"
run_logged "grid qr" "$OUT/grid_qr.txt" 120 python3 bench/kernels_extend.py --out "$OUT/grid_qr"
tail -22 "$OUT/grid_qr.txt"
stamp done
