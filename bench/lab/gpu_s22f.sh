#!/usr/bin/env bash
# bench/lab/gpu_s22f.sh -- session 22, sixth H200 call: the pair-step extend_ws instance reading Q
# into its fragments from global memory and storing O from its accumulators (variant `dq`, no Q
# staging, no bar_q_free, no consumer barrier at the end) against main, narrow libraries
# .carry/var_main.so / var_dq.so: the extend tests on dq, then each library in its own process,
# order main dq main dq (bench/lab/ext21_ab.py) on the pair-step cells and ragged batches.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s22f /tmp/out
RADIXKV_PREBUILT_LIB="$PWD/.carry/var_dq.so" run_logged "extend tests dq" "$OUT/pytest_dq.txt" 90 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
grep -E "passed|failed" "$OUT/pytest_dq.txt" | tail -1
grep -E "^FAILED" "$OUT/pytest_dq.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_dq.txt")"
CELLS="1:0:2048,16:0:2048,1:1024:2048,16:1024:2048,1:4096:128,16:4096:128,1:4096:512,16:4096:512,1:4096:2048,16:4096:2048,1:chunked,16:chunked,1:multi-turn,16:multi-turn"
for tag in main dq main dq; do
  log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 100 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" > "$log" 2>&1
  stamp "ab $tag rc=$?"
  grep -E "^$tag " "$log" | awk '{print $2, $3}' | tr '\n' ';'; echo
done
grep -h -E "^(main|dq) " "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $1, $2, $5}' | uniq -c | head -40
stamp done
