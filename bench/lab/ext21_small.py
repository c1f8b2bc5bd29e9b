"""Where page 16 loses on the short-context extend cell (a lab diagnostic, session 21).

P=0 E=128 of bench/kernels_extend.py's grid (pool sized for the grid's largest cell, as there),
three memory patterns: page 1; page 1 with its slots in runs of 16 (page 16's memory pattern through
page 1's per-row table, `Pool.cell(runs=16)`); page 16. For each: radixkv as the grid calls it
(plan, max_kv_len = 128: the two-CTA kernel), without the plan, with max_kv_len = 0 (extend_ws),
and FlashInfer fa2 / fa3. Rounds alternate the order; prints every time and the min per column.

Usage (GPU machine): PYTHONPATH=python python3 bench/lab/ext21_small.py [--rounds 3] [--out F]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extend", type=int, default=128)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    fi = ke.load_flashinfer()
    workspace = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    e = args.extend
    specs = [(0, e)] * ke.BATCH
    pools = {ps: ke.Pool(ps, 6144) for ps in (1, 16)}
    runners = {}
    for name, ps, runs in (("ps1", 1, 1), ("ps1r16", 1, 16), ("ps16", 16, 1)):
        pool = pools[ps]
        c = pool.cell(0, e, seed=e + ps + runs, runs=runs)
        r = {
            "plan": ke.radixkv_runner(pool, c, e, e, specs),
            "noplan": ke.radixkv_runner(pool, c, e, e, specs, plan=False),
            "ws": ke.radixkv_runner(pool, c, e, 0, specs, plan=False),
        }
        if fi is not None:
            for b in ("fa2", "fa3"):
                try:
                    r[b] = ke.flashinfer_runner(fi, b, pool, c, workspace)
                except Exception as exc:  # noqa: BLE001
                    print(f"{name} {b}: {exc!r}"[:200])
        ref = r["fa2"]().float() if "fa2" in r else None
        if ref is not None:
            for k in ("plan", "noplan", "ws"):
                err = float((r[k]().float() - ref).norm() / ref.norm())
                print(f"{name} {k} rel err vs fa2 {err:.1e}")
                assert err < 1e-2, (name, k, err)
        runners[name] = r
    times: dict[str, dict[str, list[float]]] = {n: {k: [] for k in r} for n, r in runners.items()}
    for rnd in range(args.rounds):
        order = list(runners) if rnd % 2 == 0 else list(reversed(runners))
        for n in order:
            ks = list(runners[n]) if rnd % 2 == 0 else list(reversed(runners[n]))
            for k in ks:
                times[n][k].append(timer(runners[n][k], reps=40))
    for n, t in times.items():
        print(f"E={e} {n:7} " + "  ".join(f"{k} {min(v):6.2f} ({' '.join(f'{x:.2f}' for x in v)})"
                                         for k, v in t.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(times, indent=1))


if __name__ == "__main__":
    main()
