"""Extend plans (host-built tile lists) against the kernels' own work orders (a probe, session 16).

For each batch (bench/kernels_extend.py's RAGGED batches and some uniform cells), times the op
with no plan and with plans built here in NumPy in several orders:

  req   every request's tiles in turn, heaviest first (the device's request order, without the scan)
  lpt   every tile of the batch, heaviest first (visible keys of its last row; ties by request)
  lpt8  runs of up to 8 consecutive ranks of one request, runs heaviest first

each with both sm_90a kernels (max_kv_len = 0: the warp-specialised one, 1: the two-CTA one) and
the product's bound. Every plan's output is compared with the no-plan output of the same kernel
(exact equality expected: the same tiles, computed the same way) and the status word is read.

Usage (GPU machine): PYTHONPATH=python python3 bench/lab/ext16_plan_ab.py [--no-plan-only]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402

TILE_ROWS = 128
SLOTS = [132]  # query-tile entries the GPU runs at once (CTAs per SM x SMs / H_kv), set per kernel
UNIFORM = ((0, 128), (0, 512), (0, 2048), (1024, 128), (1024, 512), (4096, 128), (4096, 2048))


def tiles(specs: list[tuple[int, int]], group: int) -> list[tuple[int, int, int]]:
    """(request, rank, visible keys of the tile's last row) of every query tile."""
    out = []
    for b, (p, e) in enumerate(specs):
        n = (e * group + TILE_ROWS - 1) // TILE_ROWS
        for rank in range(n):
            tile = n - 1 - rank
            row0 = tile * TILE_ROWS
            rows = min(TILE_ROWS, e * group - row0)
            out.append((b, rank, p + (row0 + rows - 1) // group + 1))
    return out


def plan(specs: list[tuple[int, int]], order: str) -> torch.Tensor:
    t = tiles(specs, ke.H_Q // ke.H_KV)
    if order == "req":
        ent = [(b, r) for b, r, _ in t]
    elif order == "lpt":
        ent = [(b, r) for b, r, _ in sorted(t, key=lambda x: (-x[2], x[0], x[1]))]
    elif order == "hyb":  # the product's rule (metadata::extend_plan) without its uniform shortcut
        runs = []
        for b, (p, e) in enumerate(specs):
            mine = [x for x in t if x[0] == b]
            size = 8 if p + e > 512 else 1
            runs += [mine[i:i + size] for i in range(0, len(mine), size)]
        runs.sort(key=lambda r: (-r[0][2], r[0][0], r[0][1]))
        ent = [(b, r) for run in runs for b, r, _ in run]
    elif order == "lpt8":
        runs = [[x for x in t if x[0] == b and x[1] // 8 == k] for b, k in sorted({(x[0], x[1] // 8) for x in t})]
        runs.sort(key=lambda r: (-r[0][2], r[0][0], r[0][1]))
        ent = [(b, r) for run in runs for b, r, _ in run]
    elif order.startswith("runs"):  # runs of consecutive ranks holding at most W / (k * slots)
        k = int(order[4:])
        total = sum(w for _, _, w in t)
        bound = max(max(w for _, _, w in t), total / (k * SLOTS[0]))
        runs, cur, acc = [], [], 0.0
        for x in t:  # t lists each request's ranks in order
            if cur and (x[0] != cur[0][0] or acc + x[2] > bound):
                runs.append(cur)
                cur, acc = [], 0.0
            cur.append(x)
            acc += x[2]
        runs.append(cur)
        runs.sort(key=lambda r: (-r[0][2], r[0][0], r[0][1]))
        ent = [(b, r) for run in runs for b, r, _ in run]
    else:
        raise ValueError(order)
    return torch.from_numpy(np.asarray(ent, dtype=np.int32).reshape(-1, 2)).cuda()


def runner(pool: ke.Pool, c: dict[str, torch.Tensor], max_q: int, bound: int,
           tile_plan: torch.Tensor | None):
    from radixkv.ops import _status  # noqa: PLC0415

    out = torch.empty_like(c["q"])
    op = torch.ops.radixkv.extend_attention.default
    args = [c["q"], pool.k, pool.v, c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["kv_lens"],
            out, 1.0 / math.sqrt(ke.D), 0, max_q, _status.buffer(c["q"].device), None, None, bound]
    if tile_plan is not None:
        args += [tile_plan, TILE_ROWS]
    return lambda: (op(*args), out)[1]


def batches(uniform_only: bool = False):
    for i, (name, groups) in enumerate(() if uniform_only else ke.RAGGED):
        yield name, ke.ragged_specs(groups, 5 + i), 5 + i
    for p, e in UNIFORM:
        yield f"P={p} E={e}", [(p, e)] * ke.BATCH, p * 7 + e


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-plan-only", action="store_true", help="the library has no plan argument")
    ap.add_argument("--tag", default="")
    ap.add_argument("--orders", default="req,lpt,lpt8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--uniform", action="store_true", help="only the uniform cells")
    ap.add_argument("--kernels", default="ws,two", help="ws (max_kv_len 0), two (1), bound (the real one)")
    args = ap.parse_args()
    from radixkv.ops import _status, loader  # noqa: PLC0415

    loader.load()
    timer = ke.Timer()
    orders = () if args.no_plan_only else tuple(args.orders.split(","))
    for ps in (1, 16):
        for name, specs, seed in batches(args.uniform):
            pages = sum(math.ceil((p + e) / ps) for p, e in specs)
            pool = ke.Pool(ps, 0, seed=seed, num_pages=int(pages * 1.25) + 1)
            c = pool.batch(specs, seed)
            max_q, max_kv = max(e for _, e in specs), max(p + e for p, e in specs)
            line = []
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            for kname in args.kernels.split(","):
                bound = {"ws": 0, "two": 1, "bound": max_kv}[kname]
                SLOTS[0] = sms * (2 if kname == "two" or bound <= 512 else 1) // ke.H_KV
                plans = {o: plan(specs, o) for o in orders}
                base = runner(pool, c, max_q, bound, None)
                ref = base().clone()
                _status.take_errors(c["q"].device)
                runs = {"none": base}
                for o, pl in plans.items():
                    run = runner(pool, c, max_q, bound, pl)
                    got = run().clone()
                    faults = _status.take_errors(c["q"].device)
                    if not torch.equal(got, ref) or faults:
                        diff = float((got.float() - ref.float()).abs().max())
                        print(f"  MISMATCH {name} ps={ps} {kname} {o}: max diff {diff} faults {faults}")
                    runs[o] = run
                cells: dict[str, list[float]] = {}
                names = list(runs)
                for i in range(args.rounds):  # interleaved and rotated, so drift hits every order alike
                    for o in names[i % len(names):] + names[: i % len(names)]:
                        cells.setdefault(o, []).append(timer(runs[o], reps=30))
                line.append(f"{kname}: " + " ".join(f"{k} {min(v):7.1f}" for k, v in cells.items()))
            print(f"[plan ab{args.tag}] ps={ps:>2} {name:<12} max_kv={max_kv:>5} | " + " | ".join(line),
                  flush=True)
            del pool, c
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
