"""A/B of extend libraries on bench/kernels_extend.py's cells (a lab probe, session 21): run once per
library (RADIXKV_PREBUILT_LIB), in alternating processes. Per cell: the op as the grid calls it
(with the extend plan), median time over `--reps` after a clean flush, and a SHA-256 of the output
bytes (libraries that differ only in scheduling must agree bit for bit).

Usage (GPU machine): RADIXKV_PREBUILT_LIB=x.so PYTHONPATH=python python3 bench/lab/ext21_ab.py \
    --tag x --cells 1:0:2048,16:1024:512,1:fresh --out DIR

A cell is page:prefix:extend (BATCH requests of one shape) or page:name, a RAGGED batch of
kernels_extend.py drawn with the seed run_ragged_extend gives it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def _record(args, timer, res, key, run) -> None:
    out = run()
    torch.cuda.synchronize()
    digest = hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:16]
    us = timer(run, reps=args.reps)
    res[key] = {"us": us, "sha": digest}
    print(f"{args.tag} {key} {us:.1f} us {digest}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--max-kv", type=int, default=None,
                    help="call the op with this max_kv_len instead of the true bound (0: unknown, the "
                         "rank-order kernel's default instance; 1: the short-context kernel)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    all_cells = [c.split(":") for c in args.cells.split(",")]
    cells = [tuple(int(x) for x in c) for c in all_cells if len(c) == 3]
    res = {}
    for ps, name in [(int(c[0]), c[1]) for c in all_cells if len(c) == 2]:
        i, groups = next((i, g) for i, (n, g) in enumerate(ke.RAGGED) if n == name)
        specs = ke.ragged_specs(groups, 5 + i)
        pages = sum(-(-(pp + e) // ps) for pp, e in specs)
        pool = ke.Pool(ps, 0, seed=i, num_pages=int(pages * 1.25) + 1)
        c = pool.batch(specs, 5 + i)
        run = ke.radixkv_runner(pool, c, max(e for _, e in specs),
                                args.max_kv if args.max_kv is not None else max(pp + e for pp, e in specs), specs)
        _record(args, timer, res, f"{ps}:{name}", run)
        del pool
        torch.cuda.empty_cache()
    for ps in sorted({c[0] for c in cells}):
        pool = ke.Pool(ps, 6144)
        for _, prefix, extend in [c for c in cells if c[0] == ps]:
            c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
            run = ke.radixkv_runner(pool, c, extend, args.max_kv if args.max_kv is not None else prefix + extend,
                                    [(prefix, extend)] * ke.BATCH)
            _record(args, timer, res, f"{ps}:{prefix}:{extend}", run)
        del pool
        torch.cuda.empty_cache()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"ab_{args.tag}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
