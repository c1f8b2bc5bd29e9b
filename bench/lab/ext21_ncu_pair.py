"""Profile target for Nsight Compute: one cell of bench/kernels_extend.py's grid run by radixkv (as
the grid calls it, with the plan) or by FlashInfer's fa2 / fa3 backend. Each side is warmed, then
called once between cudaProfilerStart / Stop, so `ncu --profile-from-start off` records exactly
that call's kernels (FlashInfer may launch more than one).

    ncu --profile-from-start off ... python3 bench/lab/ext21_ncu_pair.py --side fa3 --prefix 0 --extend 2048

`--ragged NAME` profiles a RAGGED batch of kernels_extend.py instead (seeded as its ragged run
seeds it); `--max-kv N` calls radixkv with that max_kv_len (1: the short-context kernel).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=("radixkv", "fa2", "fa3"), required=True)
    ap.add_argument("--prefix", type=int, default=0)
    ap.add_argument("--extend", type=int, default=2048)
    ap.add_argument("--page", type=int, default=1)
    ap.add_argument("--ragged", default=None)
    ap.add_argument("--max-kv", type=int, default=None)
    a = ap.parse_args()
    from radixkv.ops import loader  # noqa: PLC0415

    loader.load()
    if a.ragged:
        i, groups = next((i, g) for i, (n, g) in enumerate(ke.RAGGED) if n == a.ragged)
        specs = ke.ragged_specs(groups, 5 + i)
        pages = sum(-(-(p + e) // a.page) for p, e in specs)
        pool = ke.Pool(a.page, 0, seed=i, num_pages=int(pages * 1.25) + 1)
        c = pool.batch(specs, 5 + i)
    else:
        specs = [(a.prefix, a.extend)] * ke.BATCH
        pool = ke.Pool(a.page, 6144)
        c = pool.cell(a.prefix, a.extend, seed=a.prefix * 7 + a.extend + a.page)
    max_q, max_kv = max(e for _, e in specs), max(p + e for p, e in specs)
    if a.side == "radixkv":
        run = ke.radixkv_runner(pool, c, max_q, max_kv if a.max_kv is None else a.max_kv, specs)
    else:
        fi = ke.load_flashinfer()
        ws = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        run = ke.flashinfer_runner(fi, a.side, pool, c, ws)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    what = a.ragged or f"P={a.prefix} E={a.extend}"
    print(f"[ext21_ncu_pair] {a.side} {what} page={a.page} max_kv={a.max_kv}: profiled one call")


if __name__ == "__main__":
    main()
