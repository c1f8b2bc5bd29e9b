#!/usr/bin/env bash
# bench/lab/gpu_s23e.sh -- session 23, fifth H200 call: qb (the persistent instance with five K/V
# stages and an output tile: each consumer warp loads the next tile's Q rows under the current
# tile's epilogue) against qp (slot ring + L2 prefetch of Q; consumers load Q at the tile's start)
# and main, narrow libraries, each in its own process, two rounds in rotated order; default
# max_kv_len and max_kv_len = 0 (persistent everywhere). Then the extend and fault tests on qb, and
# compute-sanitizer (memcheck, synccheck, racecheck) on the many-slot persistent test.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s23e /tmp/out
ab() {  # tag extra-args...
  local tag="$1"; shift
  local log="$OUT/ab_${tag}_$SECONDS.log"
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${tag%%_*}.so" timeout 120 python3 bench/lab/ext21_ab.py --cells "$CELLS" \
    --tag "$tag" --out "$OUT/ab_$SECONDS" "$@" > "$log" 2>&1
  stamp "ab $tag rc=$?"
}
CELLS="1:0:512,16:0:512,1:0:2048,1:1024:128,1:1024:512,16:1024:512,1:fresh,16:fresh,1:short,1:tiny,16:tiny"
for tag in main qp qb qb qp main; do ab $tag; done
CELLS="1:0:128,1:0:2048,16:0:2048,1:1024:2048,16:1024:2048,1:4096:512,1:4096:2048,1:chunked,1:multi-turn"
for tag in main_p0 qp_p0 qb_p0 qb_p0 qp_p0 main_p0; do ab $tag --max-kv 0; done
grep -h -E "^(main|qp|qb)" "$OUT"/ab_*.log | sort -k2,2 -k1,1 | awk '{print $2, $1, $3, $5}' > "$OUT/ab_all.txt"
rm -rf "$OUT"/ab_[0-9]* "$OUT"/ab_*.log
export RADIXKV_PREBUILT_LIB="$PWD/.carry/var_qb.so"
run_logged "extend tests qb" "$OUT/pytest_qb.txt" 150 \
  python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py tests/test_kernel_faults_gpu.py
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
for tool in memcheck synccheck racecheck; do
  [[ -n "$CS" ]] && run_logged "$tool" "$OUT/$tool.txt" 120 "$CS" --tool $tool --print-limit 10 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py -k "persistent_ctas or more_queries or bad_plan"
done
echo "== ab"; awk '{k=$1" "$2; a[k]=a[k]" "$3; h[k]=$4} END {for (k in a) print k, a[k], h[k]}' "$OUT/ab_all.txt" | sort
echo "== tests"; grep -E "passed|failed" "$OUT/pytest_qb.txt" | tail -1
grep -E "^FAILED" "$OUT/pytest_qb.txt" | grep -v -i "unsupported" | head -10
echo "unsupported: $(grep -c -i "unsupported" "$OUT/pytest_qb.txt")"
for tool in memcheck synccheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|hazard" "$OUT/$tool.txt" | tail -4; done
stamp done
