#!/usr/bin/env bash
# bench/lab/gpu_s28b.sh -- session 28, call 3: how much of B=1 decode's excess is the split merge.
# Four narrow libraries (bench/lab/prebuild_variants.sh; D = 128, bf16, pages 1/16, e4m3), carried
# xz-compressed in .carry/xz: mn = main's hip/; nm = main with merging off (every unit writes its
# own partial as the output: wrong, the floor any merge could reach); nf = main with the ticket a
# relaxed atomic (no release/acquire: may read stale partials; the fence's cost); ll = main with
# bench/lab/dec28_ll.py's designated merger fed by flagged words (no fence, no ticket).
# bench/lab/dec25_ab.py per library in its own process, order mn ll nf nm mn ll nf nm, outputs
# dumped; then mn, ll and nf compared bit for bit (inputs follow the cells' seeds).
set -uo pipefail
export PYTHONUNBUFFERED=1
for v in mn nm nf ll; do xz -dc .carry/xz/$v.so.xz > .carry/var_$v.so || exit 1; done
source bench/gpu_env.sh
gpu_begin gpu_s28b /tmp/out
export RADIXKV_BUILD_DIR=/tmp/radixkv-build
for tag in mn ll nf nm mn ll nf nm; do
  extra=(); [[ $tag == nm ]] && extra=(--no-check)
  RADIXKV_PREBUILT_LIB="$PWD/.carry/var_$tag.so" timeout 150 python3 bench/lab/dec25_ab.py --tag "$tag" \
    --out "$OUT/json_$SECONDS" --dump /tmp/dump_$tag --ws-floats 4194304 "${extra[@]}" \
    > "$OUT/ab_${tag}_$SECONDS.txt" 2>&1
  stamp "ab $tag rc=$?"
done
python3 - <<'PY' > "$OUT/bits.txt" 2>&1
import glob, os, torch
for other in ("ll", "nf"):
    same = diff = 0
    for f in sorted(glob.glob("/tmp/dump_mn/*.pt")):
        g = f.replace("/dump_mn/mn_", f"/dump_{other}/{other}_")
        if not os.path.exists(g):
            continue
        a, b = torch.load(f), torch.load(g)
        if torch.equal(a, b):
            same += 1
        else:
            diff += 1
            print(other, "differs:", os.path.basename(f), float((a.float() - b.float()).abs().max()))
    print(f"{other} vs mn: bit-equal in {same} cells, different in {diff}")
PY
echo "== ab"; grep -h -E "^(mn|ll|nf|nm) " "$OUT"/ab_*.txt | sort -s -k2,2 -k3,3 -k4,4 -k1,1
grep -h -i -E "error|Traceback" "$OUT"/ab_*.txt | head -8
cat "$OUT/bits.txt"
rm -rf "$OUT"/json_*
( cd "$OUT" && tar czf /tmp/s28b.tgz . && rm -rf ./* && mv /tmp/s28b.tgz . )
stamp done
