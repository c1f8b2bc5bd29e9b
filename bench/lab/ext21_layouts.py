"""How much of an extend cell's time is its random page layout (a lab diagnostic, session 21).

bench/kernels_extend.py times each cell of its grid on one random page layout (seed = P * 7 + E +
page size). This times every cell on `--layouts` layouts (that seed, then + 1000, + 2000, ...):
radixkv as the grid calls it (with the extend plan), FlashInfer fa2 and fa3, in an order rotated
per layout. Prints per cell each backend's time per layout, the ratios per layout, and the ratios
of the median times.

Usage (GPU machine): PYTHONPATH=python python3 bench/lab/ext21_layouts.py [--layouts 5] [--out F]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--cells", default="", help="ps:P:E,... (default: the grid)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    fi = ke.load_flashinfer()
    if fi is None:
        sys.exit("FlashInfer not found")
    workspace = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    if args.cells:
        cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")]
    else:
        cells = [(ps, p, e) for ps in ke.PAGE_SIZES for p in ke.PREFIXES for e in ke.EXTENDS]
    rows = []
    for ps in sorted({c[0] for c in cells}):
        pool = ke.Pool(ps, max(p + e for _, p, e in ke_cells(cells, ps)))
        for _, prefix, extend in ke_cells(cells, ps):
            per = {"ours": [], "fa2": [], "fa3": []}
            for k in range(args.layouts):
                c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps + 1000 * k)
                run = {
                    "ours": ke.radixkv_runner(pool, c, extend, prefix + extend, [(prefix, extend)] * ke.BATCH),
                    "fa2": ke.flashinfer_runner(fi, "fa2", pool, c, workspace),
                    "fa3": ke.flashinfer_runner(fi, "fa3", pool, c, workspace),
                }
                if k == 0:
                    ref = run["fa3"]().float()
                    err = float((run["ours"]().float() - ref).norm() / ref.norm())
                    assert err < 1e-2, (ps, prefix, extend, err)
                names = list(run)
                names = names[k % 3:] + names[:k % 3]
                for n in names:
                    per[n].append(timer(run[n], reps=args.reps))
                del c, run
            med = {n: statistics.median(v) for n, v in per.items()}
            row = {"page_size": ps, "prefix": prefix, "extend": extend, "times": per,
                   "median": med, "vs_fa2": med["fa2"] / med["ours"], "vs_fa3": med["fa3"] / med["ours"],
                   "vs_fa2_each": [a / b for a, b in zip(per["fa2"], per["ours"])],
                   "vs_fa3_each": [a / b for a, b in zip(per["fa3"], per["ours"])]}
            rows.append(row)
            print(f"ps={ps:>2} P={prefix:>4} E={extend:>4} | ours {' '.join(f'{x:.1f}' for x in per['ours'])} "
                  f"| fa2 x{row['vs_fa2']:.3f} ({' '.join(f'{x:.3f}' for x in row['vs_fa2_each'])}) "
                  f"| fa3 x{row['vs_fa3']:.3f} ({' '.join(f'{x:.3f}' for x in row['vs_fa3_each'])})", flush=True)
        del pool
        torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


def ke_cells(cells, ps):
    return [c for c in cells if c[0] == ps]


if __name__ == "__main__":
    main()
