"""B=1 decode against its units per request, beside the same-size read (a lab probe, session 24).

One request of L tokens (bench/kernels.py's pool, cell and runner; H_q 32, H_kv 8, D 128, bf16),
timed in turns (Timer.interleaved: each rep calls every side once after its own clean flush) with
the product's plan and with plans cutting the request into each of --splits units, and with a
contiguous Triton read of the same bytes. 16 units x 8 KV heads fill 128 of the H200's 132 SMs
with one 192 KB block each; more than 132 blocks take the 96 KB shape, two per SM (33 units: all
264 places).

Usage (GPU machine, after bench/gpu_env.sh): PYTHONPATH=python python3 bench/lab/dec24_b1.py
    [--lengths 32768] [--splits 16,32,33,48,64,66] [--rounds 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels as kb  # noqa: E402

kb.torch = torch  # the module binds torch in its main()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="32768")
    ap.add_argument("--splits", default="16,32,33,48,64,66")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    splits = [int(x) for x in args.splits.split(",")]
    timer = kb.Timer()
    pool = kb.Pool(max(lengths) + 64 * 16)
    same = torch.empty(max(lengths) * kb.BYTES_PER_TOKEN // 2, dtype=torch.bfloat16, device="cuda").normal_()
    for page in (1, 16):
        k, v = pool.view(page)
        for length in lengths:
            c = pool.cell(1, length, page, seed=length + page)
            sides = {"plan": kb.radixkv_runner(k, v, c)}
            ref = sides["plan"]().float()
            for s in splits:
                fn = kb.radixkv_runner(k, v, c, num_splits=s)
                err = float((fn().float() - ref).norm() / ref.norm())
                assert err < 1e-2, (s, err)
                sides[f"s{s}"] = fn
            sides["read"] = kb._triton_read(same[: length * kb.BYTES_PER_TOKEN // 2])
            for r in range(args.rounds):
                t = timer.interleaved(sides, args.reps)
                print(f"ps={page} L={length} round {r}: " + " ".join(f"{n}={u:.1f}" for n, u in t.items())
                      + f" | plan/read {t['plan'] / t['read']:.3f}, best split/read "
                      + f"{min(t[f's{s}'] for s in splits) / t['read']:.3f}", flush=True)


if __name__ == "__main__":
    main()
