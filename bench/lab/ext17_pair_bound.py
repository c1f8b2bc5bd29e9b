"""Where should the pair steps start? Times chosen cells of bench/kernels_extend.py's workload with
the op given the cell's real max_kv_len (the product's choice: single-tile steps up to 2048 keys)
and with an overstated bound (4097: the pair-step instance), rotated over rounds, op called
directly as kernels_extend calls it (clean L2 flush, median). A probe, not a benchmark.

Usage (GPU machine): RADIXKV_PREBUILT_LIB=... PYTHONPATH=python python3 bench/lab/ext17_pair_bound.py \
    [--cells 1:0:2048,16:1024:512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="1:0:2048,16:0:2048,1:1024:512,16:1024:512,1:1024:128,16:1024:128,1:0:512")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")]
    for ps in sorted({c[0] for c in cells}):
        mine = [c for c in cells if c[0] == ps]
        pool = ke.Pool(ps, max(p + e for _, p, e in mine))
        for _, prefix, extend in mine:
            c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
            real = ke.radixkv_runner(pool, c, extend, max_kv_len=prefix + extend)
            over = ke.radixkv_runner(pool, c, extend, max_kv_len=4097)
            a = real().clone()
            b = over().clone()
            err = float((a.float() - b.float()).norm() / a.float().norm())
            t = {"real": [], "pairs": []}
            for r in range(args.rounds):
                order = (("real", real), ("pairs", over)) if r % 2 == 0 else (("pairs", over), ("real", real))
                for name, fn in order:
                    t[name].append(timer(fn, args.reps))
            tr, tp = min(t["real"]), min(t["pairs"])
            print(f"[pair bound] ps={ps:>2} P={prefix:>5} E={extend:>5} | bound {prefix + extend:>5}: "
                  f"{tr:8.1f} us | 4097 (pairs): {tp:8.1f} us | pairs/real {tp / tr:.3f} | "
                  f"diff {err:.1e}", flush=True)
        del pool


if __name__ == "__main__":
    main()
