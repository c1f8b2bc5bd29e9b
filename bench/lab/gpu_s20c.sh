#!/usr/bin/env bash
# bench/lab/gpu_s20c.sh -- session 20, H200 call 3: the per-CTA time line (bench/lab/ext20_stamps.py)
# of the probe library against three start-up variants on top of it: th (the producer waits for
# tile 0 after issuing tiles 0 and 1, then fills the ring), meta (a request's metadata in one round
# trip), thm (both); then the extend tests on thm's narrow library. One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s20c /tmp/out
CELLS="${CELLS:-1:0:2048,16:0:2048,1:1024:512,16:1024:512,1:1024:2048,16:1024:2048,1:1024:128,16:1024:128,1:4096:512,1:4096:2048}"
for tag in ${TAGS:-probe th meta thm probe th meta thm}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "stamps $tag" "$OUT/stamps_$tag.log" 200 \
    python3 bench/lab/ext20_stamps.py --cells "$CELLS" --tag "${tag}_$SECONDS" --shots 1 --out "$OUT/stamps"
  cat "$OUT/stamps_$tag.log" >> "$OUT/stamps_all.log"
done
sort -t' ' -k2,4 "$OUT/stamps_all.log" | grep "CTAs"
if [[ "${TESTS:-1}" == 1 ]]; then
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${TEST_TAG:-thm}.so" run_logged "extend tests" "$OUT/pytest.txt" 240 \
    python3 -m pytest -q -p no:cacheprovider tests/test_extend_gpu.py
  tail -2 "$OUT/pytest.txt"
  grep -E "^E .*Error" "$OUT/pytest.txt" | sort | uniq -c | head
fi
( cd "$OUT" && tar czf /tmp/s20c.tgz . && rm -rf ./* && mv /tmp/s20c.tgz . )
stamp done
