#!/usr/bin/env bash
# bench/lab/gpu_s19c.sh -- session 19, H200 call 3: FP8 decode with the scales loaded first (v1)
# against main (v0), narrow libraries of bench/lab/prebuild_variants.sh, timed by
# bench/lab/decode_ab.py in the order v0 v1 v0 v1; then the FP8 decode tests on v1 (the cases the
# narrow library lacks fail as "unsupported"). Call 4: TAGS="v0 v1 v2 v0 v1 v2" TESTS=0 (v2: only
# the K scale loaded first). Call 7: TAGS="v0 v12 v0 v12" TEST_TAG=v12 (long FP8 units on 12 warps
# of 2 stages). One archive comes back.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin gpu_s19c /tmp/out
for tag in ${TAGS:-v0 v1 v0 v1}; do
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" run_logged "ab $tag" "$OUT/ab_$tag.log" 150 \
    python3 bench/lab/decode_ab.py --tag "$tag" --out "$OUT/$tag.$SECONDS"
  cat "$OUT/ab_$tag.log" >> "$OUT/ab_all.log"
done
if [[ "${TESTS:-1}" == 1 ]]; then
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_${TEST_TAG:-v1}.so" run_logged "fp8 tests ${TEST_TAG:-v1}" "$OUT/pytest_v1.txt" 200 \
    python3 -m pytest -q -p no:cacheprovider tests/test_fp8_gpu.py -k decode
  tail -2 "$OUT/pytest_v1.txt"
  grep -E "^E .*Error" "$OUT/pytest_v1.txt" | sort | uniq -c
fi
python3 - "$OUT" <<'PY'
import json, sys, glob, statistics
rows = [r for f in glob.glob(sys.argv[1] + "/*/decode_ab_*.json") for r in json.load(open(f))]
cells = sorted({(r["page"], r["batch"], r["kv_len"]) for r in rows})
for c in cells:
    line = []
    for t in sorted({r["tag"] for r in rows}):
        rs = [r for r in rows if (r["page"], r["batch"], r["kv_len"]) == c and r["tag"] == t]
        line.append(f"{t} e4m3 " + "/".join(f"{r['e4m3_us']:.1f}" for r in rs) + " bf16 " + "/".join(f"{r['bf16_us']:.1f}" for r in rs))
    print(f"ps={c[0]:>2} B={c[1]:>3} L={c[2]:>5} | " + " | ".join(line))
PY
( cd "$OUT" && tar czf /tmp/s19c.tgz . && rm -rf ./* && mv /tmp/s19c.tgz . )
stamp done
