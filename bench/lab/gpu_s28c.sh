#!/usr/bin/env bash
# bench/lab/gpu_s28c.sh -- session 28, call 4: main's library (bench/prebuild.sh, carried as
# .carry/xz/main.so.xz + .carry/radixkv_kernels_sm90.hash): the extend grid against FlashInfer fa2 /
# fa3 (bench/kernels_extend.py, the 18 cells), then compute-sanitizer memcheck and racecheck over
# the decode merge's GPU tests (the merge changed in session 26 and has not been under the sanitizer).
set -uo pipefail
export PYTHONUNBUFFERED=1
xz -dc .carry/xz/main.so.xz > .carry/radixkv_kernels_sm90.so || exit 1
source bench/gpu_env.sh
gpu_begin gpu_s28c /tmp/out
use_prebuilt_library
[[ -n "${RADIXKV_PREBUILT_LIB:-}" ]] || { echo "no prebuilt library"; exit 1; }
run_logged "grid" "$OUT/grid.txt" 170 python3 bench/kernels_extend.py --out "$OUT/results"
echo "== grid"; tail -22 "$OUT/grid.txt"
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
sel="merge or split or ragged_batch or bad_plan or graph_replay"
[[ -n "$CS" ]] && run_logged memcheck "$OUT/memcheck.txt" 150 "$CS" --tool memcheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_decode_plan.py -k "$sel"
[[ -n "$CS" ]] && run_logged racecheck "$OUT/racecheck.txt" 100 "$CS" --tool racecheck --print-limit 10 \
  python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py -k "fused_merge_many_splits"
for tool in memcheck racecheck; do echo "== $tool"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/$tool.txt" | tail -3; done
rm -f "$OUT"/results/*.png
( cd "$OUT" && tar czf /tmp/s28c.tgz . && rm -rf ./* && mv /tmp/s28c.tgz . )
stamp done
