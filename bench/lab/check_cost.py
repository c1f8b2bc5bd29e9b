"""What the device-side input checks (hip/guard.h) cost paged decode: one side of an A/B.

Run once per build (the shipped kernels, a copy of hip/ whose guard.h helpers are made
pass-through by `--patch`, and optionally another commit's kernels), alternating, from
bench/lab/gpu_check_cost.sh; `--compare` then prints per cell each build's time over the
unchecked one's. Cells: bench/kernels.py's uniform and ragged
decode cells at page sizes 1 and 16. Each sample is one CUDA-graph replay after the "clean" L2
flush (bench/_gpu_timing.py); a cell's figure is the 20%-trimmed mean of its samples, whose
averaging resolves differences below the event timer's ~0.5 µs granularity.

  python bench/lab/check_cost.py --patch SRC_HIP DST_HIP     make the unchecked copy
  python bench/lab/check_cost.py --time TAG --out FILE.jsonl time this build's kernels
  python bench/lab/check_cost.py --compare FILE.jsonl        per-cell ratios
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from _patch import fresh_copy, replace_once  # noqa: E402  (bench/lab, the script's own folder)

# guard.h's helpers, each replaced by the same function without its check. The text must match
# exactly, so a change to guard.h fails the patch instead of silently timing the checks twice.
PATCHES = [
    ("if (checks != 0u && status != nullptr) atomicOr(status, checks << (8 * op));",
     "(void)status; (void)op; (void)checks;"),
    ("if (bits != 0u && status != nullptr) atomicOr(status + 2, bits);",
     "(void)status; (void)bits;"),
    ("if (status != nullptr && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)\n"
     "    atomicOr(status + 1, kernel);",
     "(void)status; (void)kernel;"),
    ("  const int n = nnz < 0x7fffffff ? static_cast<int>(nnz) : 0x7fffffff;\n"
     "  checks |= (s0 < 0 || s1 < s0) ? kIndptrOrder : 0u;\n"
     "  checks |= s1 > n ? kIndptrOverrun : 0u;\n"
     "  const int lo = min(max(s0, 0), n);\n"
     "  const int hi = min(max(s1, lo), n);\n"
     "  return Row{lo, hi - lo};",
     "  (void)nnz; (void)checks;\n  return Row{s0, s1 - s0};"),
    ("  const int64_t cap64 = static_cast<int64_t>(max(pages, 0)) * page_size;\n"
     "  const int cap = cap64 < 0x7fffffff ? static_cast<int>(cap64) : 0x7fffffff;\n"
     "  checks |= len < 0 ? kLenNegative : (len > cap ? kLenBeyondPages : 0u);\n"
     "  return min(max(len, 0), cap);",
     "  (void)pages; (void)page_size; (void)checks;\n  return len;"),
    ("  return static_cast<unsigned>(page) < static_cast<unsigned>(num_pages);",
     "  (void)page; (void)num_pages;\n  return true;"),
]


# The matrix-unit decode kernel's page-range check is inline: its `raw >= 0` half stays (it
# marks keys past the request, kNoKey), the pool bound goes.
KERNEL_PATCHES = {
    "paged_decode_mma.cuh": [
        ("pg[s] = (raw[s] >= 0 && raw[s] < p.num_pages) ? raw[s] : -1;",
         "pg[s] = raw[s] >= 0 ? raw[s] : -1;"),
        ("bad_page |= pg[s] < 0 && raw[s] != kNoKey;", ""),
    ],
}


def patch(src: Path, dst: Path) -> None:
    fresh_copy(src, dst)
    replace_once(dst / "guard.h", PATCHES, "check_cost")
    for name, patches in KERNEL_PATCHES.items():
        replace_once(dst / name, patches, "check_cost")
    print(f"unchecked copy of {src} in {dst}")


def cells():
    import kernels as kb  # noqa: PLC0415

    for batch in kb.BATCHES:
        for length in kb.LENGTHS:
            yield f"B={batch} L={length}", [length] * batch
    for batch, lo, hi, seed in kb.RAGGED:
        yield f"B={batch} ragged {lo}-{hi}", kb.ragged_lens(batch, lo, hi, seed)


def time_build(tag: str, out: Path, samples: int) -> None:
    import torch  # noqa: PLC0415

    import kernels as kb  # noqa: PLC0415
    from _gpu_timing import Timer  # noqa: PLC0415
    from radixkv.ops import loader  # noqa: PLC0415

    kb.torch = torch
    loader.load()
    timer = Timer()
    pool = kb.Pool(max(kb.BATCHES) * max(kb.LENGTHS) + 64 * 16)
    with out.open("a") as f:
        for page in kb.PAGE_SIZES:
            k, v = pool.view(page)
            for name, lens in cells():
                if len(set(lens)) == 1:
                    c = pool.cell(len(lens), lens[0], page, seed=len(lens) * 7 + lens[0] + page)
                else:
                    c = pool.ragged_cell(lens, page, seed=len(lens) + page)
                run = kb.radixkv_runner(k, v, c)  # holds the plan and output the graph replays
                g = timer.graph(run)
                for _ in range(3):
                    g.replay()
                n = samples if sum(lens) < (1 << 20) else max(20, samples // 5)
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
                for i in range(n):
                    timer.do_flush("clean")
                    starts[i].record()
                    g.replay()
                    ends[i].record()
                torch.cuda.synchronize()
                ts = sorted(1e3 * s.elapsed_time(e) for s, e in zip(starts, ends))
                cut = len(ts) // 5
                row = {"tag": tag, "page": page, "cell": name, "n": n,
                       "trimmed_us": statistics.fmean(ts[cut:len(ts) - cut]),
                       "median_us": statistics.median(ts)}
                f.write(json.dumps(row) + "\n")
                print(f"{tag} ps{page} {name}: {row['trimmed_us']:.2f} µs", flush=True)


def compare(path: Path) -> None:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    by: dict[tuple[int, str], dict[str, list[float]]] = {}
    for r in rows:
        by.setdefault((r["page"], r["cell"]), {}).setdefault(r["tag"], []).append(r["trimmed_us"])
    tags = sorted({t for d in by.values() for t in d if t != "unchecked"})
    print("| ps | cell | unchecked µs | " + " | ".join(f"{t} µs | {t} / unchecked" for t in tags) + " |")
    print("|---:|---|---:|" + "---:|---:|" * len(tags))
    ratios: dict[str, list] = {t: [] for t in tags}
    for (page, cell), d in by.items():
        if "unchecked" not in d:
            continue
        base = min(d["unchecked"])  # best pass of each side: the least disturbed
        cols = []
        for t in tags:
            if t in d:
                a = min(d[t])
                ratios[t].append((a / base, page, cell))
                cols.append(f"{a:.2f} | {a / base:.4f}")
            else:
                cols.append("- | -")
        print(f"| {page} | {cell} | {base:.2f} | " + " | ".join(cols) + " |")
    for t, rs in ratios.items():
        if rs:
            gm = math.exp(sum(math.log(r[0]) for r in rs) / len(rs))
            worst = max(rs)
            print(f"{t}/unchecked: geomean {gm:.4f} over {len(rs)} cells; worst {worst[0]:.4f} "
                  f"(ps{worst[1]} {worst[2]}); cells above 1.01: {sum(r[0] > 1.01 for r in rs)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patch", nargs=2, type=Path, metavar=("SRC", "DST"))
    ap.add_argument("--time", metavar="TAG")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--compare", type=Path)
    a = ap.parse_args()
    if a.patch:
        patch(*a.patch)
    elif a.time:
        time_build(a.time, a.out, a.samples)
    elif a.compare:
        compare(a.compare)
    else:
        ap.error("one of --patch, --time, --compare")


if __name__ == "__main__":
    main()
