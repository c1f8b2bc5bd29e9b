"""Decode cells under the product's plan beside a contiguous read of the same bytes, timed in turns
(a lab A/B, session 25: run once per library, each in its own process, RADIXKV_PREBUILT_LIB set).
Checks each cell's output against radixkv.ops.reference in float32 (relative error).

Usage (GPU machine): PYTHONPATH=python python3 bench/lab/dec25_ab.py --tag v0 --out DIR
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels as kb  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402

kb.torch = torch
CELLS = [(1, 512), (1, 4096), (1, 16384), (1, 32768), (4, 8192), (16, 4096), (64, 512)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--dump", type=Path, default=None,
                    help="save each cell's output here (seeded inputs: compare libraries bit for bit)")
    ap.add_argument("--no-check", action="store_true",
                    help="time a library whose outputs are knowingly wrong (a floor probe): errors printed only")
    ap.add_argument("--ws-floats", type=int, default=0,
                    help="seed the wrapper's cached decode workspace with this many floats (a lab "
                         "kernel that needs more than the product's size)")
    args = ap.parse_args()
    if args.ws_floats:
        from radixkv.ops import _api  # noqa: PLC0415
        dev = torch.device("cuda", torch.cuda.current_device())
        _api._workspaces[dev] = torch.zeros(args.ws_floats, dtype=torch.float32, device=dev)
    timer = kb.Timer()
    pool = kb.Pool(max(b * l for b, l in CELLS) + 64 * 16)
    same = torch.empty(max(b * l for b, l in CELLS) * kb.BYTES_PER_TOKEN // 2, dtype=torch.bfloat16,
                       device="cuda").normal_()
    rows = []
    for page in (1, 16):
        k, v = pool.view(page)
        kf, vf = k.float(), v.float()  # the reference's inputs, once per page size
        for batch, length in CELLS:
            c = pool.cell(batch, length, page, seed=batch * 100003 + length + page)
            run = kb.radixkv_runner(k, v, c)
            got = run()
            if args.dump is not None:
                args.dump.mkdir(parents=True, exist_ok=True)
                torch.save(got.cpu(), args.dump / f"{args.tag}_p{page}_b{batch}_l{length}.pt")
            got = got.float()
            want = R.paged_decode(c["q"].float(), kf, vf, c["kv_indptr"], c["kv_indices"], c["kv_lens"])
            err = float((got - want).norm() / want.norm())
            assert args.no_check or err < 1e-2, (page, batch, length, err)
            sides = {"ours": run, "read": kb._triton_read(same[: batch * length * kb.BYTES_PER_TOKEN // 2])}
            t = timer.interleaved(sides, args.reps)
            row = {"tag": args.tag, "page": page, "batch": batch, "kv_len": length, "us": t["ours"],
                   "read_us": t["read"], "rel_err": err}
            rows.append(row)
            print(f"{args.tag} ps={page:>2} B={batch:>3} L={length:>5} {t['ours']:7.2f} us, read "
                  f"{t['read']:7.2f}, ratio {t['ours'] / t['read']:.3f}, err {err:.1e}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"dec25_ab_{args.tag}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
