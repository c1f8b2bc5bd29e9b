#!/usr/bin/env bash
# bench/lab/gpu_s20b.sh -- session 20, H200 call 2: the per-CTA time line (bench/lab/ext20_stamps.py)
# of the probe library (hip/ + ext20_probe.patch) and of "pf" (+ ext20_pf.patch: each CTA's
# producer prefetches into L2 the Q rows and first K/V tiles of the CTA one SM count later), each
# twice, alternating; then the extend tests on pf's narrow library. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20b /tmp/out
CELLS="${CELLS:-1:0:2048,1:4096:2048,1:1024:512,1:1024:2048,1:1024:128,1:4096:128,16:0:2048,16:1024:512}"
for tag in ${TAGS:-probe pf probe pf}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 2 --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-1}" == 1 ]]; then
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${TEST_TAG:-pf}.so" run_logged "extend tests" "$OUT/pytest.txt" 240 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
  tail -2 "$OUT/pytest.txt"
  grep -E "^E .*Error" "$OUT/pytest.txt" | sort | uniq -c | head
fi
( cd "$OUT" && tar czf /tmp/s20b.tgz . && rm -rf ./* && mv /tmp/s20b.tgz . )
stamp done
