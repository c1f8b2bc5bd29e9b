"""Old vs new decode, cell by cell: reads DIR/old/paged_decode.json and DIR/new/paged_decode.json
(bench/kernels.py --out of two builds timed in one call, e.g. by bench/lab/gpu_decode12.sh) and prints
a Markdown table (time ratio, each against FlashInfer, fraction of the read stream, work units),
the B=1 L=32768 cell against a contiguous read of the same bytes, and the ragged cells against
FlashInfer.

    python3 bench/decode_compare.py DIR
"""
import json, math, sys
from pathlib import Path

out = Path(sys.argv[1])
def rows(name):
    p = out / name / "paged_decode.json"
    return json.loads(p.read_text())["rows"] if p.exists() else []
key = lambda r: (r["page_size"], r["batch"], r.get("ragged", ""), r["kv_len"])
old = {key(r): r for r in rows("old")}
print("| ps | B | lengths | MB | new µs | old µs | new/old | new vs FI | old vs FI | new of read | work |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
worst, ratios = [], []
for r in rows("new"):
    o = old.get(key(r))
    ratio = r["radixkv_us"] / o["radixkv_us"] if o else float("nan")
    if o:
        ratios.append(ratio)
        worst.append((ratio, key(r)))
    shape = f"ragged {r['ragged']} (mean {r['kv_len']})" if "ragged" in r else f"L={r['kv_len']}"
    f = lambda d, k, fmt="{:.2f}": fmt.format(d[k]) if d and k in d else "-"
    print(f"| {r['page_size']} | {r['batch']} | {shape} | {r['kv_bytes'] / 1e6:.0f} | "
          f"{r['radixkv_us']:.1f} | {f(o, 'radixkv_us', '{:.1f}')} | {ratio:.3f} | "
          f"{f(r, 'vs_flashinfer')} | {f(o, 'vs_flashinfer')} | {r['frac_read']:.2f} | "
          f"{r['num_splits']} |")
    if "read_same_us" in r and r["batch"] == 1 and r["kv_len"] == 32768:
        print(f"|   | B=1 L=32768: new {r['radixkv_us']:.1f} µs vs same-size contiguous read "
              f"{r['read_same_us']:.1f} µs = x{r['radixkv_us'] / r['read_same_us']:.2f} (target <= 1.10) |")
if ratios:
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"new/old time: geomean {gm:.3f} over {len(ratios)} cells; worst {max(worst)[0]:.3f} at {max(worst)[1]}")
rg = [r for r in rows("new") if "ragged" in r and "vs_flashinfer" in r]
if rg:
    print("ragged vs FlashInfer (target >= 1.0): " + ", ".join(
        f"ps{r['page_size']} B={r['batch']} x{r['vs_flashinfer']:.2f}" for r in rg))
