"""Per-CTA time line of the warp-specialised extend kernel (a lab probe, session 20).

Needs a library built from a hip/ with bench/lab/ext20_probe.patch (clock64 stamps per CTA in a
device buffer, read by rk_probe_read). For each cell (ps:P:E of bench/kernels_extend.py's
workload) it times the op as the bench does, then runs it `--shots` times after a clean L2 flush
and saves every CTA's 16 words: 0 entry, 1 producer's first tile issued, 2 consumer 0's Q
fragments, 3 tile 0 landed (consumer 0), 4 loop done, 5 output stored (consumer 0), 6 tile count,
7 smid | globaltimer << 8, 8 tile resolved (thread 0), 9 Q landed (consumer 0), 10 consumer 1's
output stored, 11 producer's first page entry in hand.

Usage (GPU machine): RADIXKV_PREBUILT_LIB=probe.so PYTHONPATH=python python3
    bench/lab/ext20_stamps.py --cells 1:0:2048,1:4096:2048 --out DIR
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", required=True)
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", default="")
    ap.add_argument("--plan", action="store_true",
                    help="call the op as bench/kernels_extend.py's grid does (radixkv_runner: with the extend plan)")
    args = ap.parse_args()
    from radixkv import ops
    from radixkv.ops import loader

    loader.load()
    lib = ctypes.CDLL(os.environ["RADIXKV_PREBUILT_LIB"])
    stamped = hasattr(lib, "rk_probe_read")  # else: times only
    if stamped:
        lib.rk_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    n_words = 16384 * 16
    host = np.zeros(n_words, dtype=np.uint64)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = ke.Timer()
    cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")]
    summary = []
    for ps in sorted({c[0] for c in cells}):
        mine = [c for c in cells if c[0] == ps]
        pool = ke.Pool(ps, max(p + e for _, p, e in mine))
        for _, prefix, extend in mine:
            c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
            o = torch.empty_like(c["q"])

            def run(c=c, o=o, prefix=prefix, extend=extend):
                return ops.extend_attention(c["q"], pool.k, pool.v, c["qo_indptr"], c["kv_indptr"],
                                            c["kv_indices"], c["kv_lens"], out=o, max_q_len=extend,
                                            max_kv_len=prefix + extend, check=False)

            if args.plan:
                run = ke.radixkv_runner(pool, c, extend, prefix + extend, [(prefix, extend)] * ke.BATCH)
            us = timer(run, reps=30)
            used = np.zeros(1, dtype=bool)
            for shot in range(args.shots if stamped else 0):
                assert lib.rk_probe_clear() == 0
                torch.cuda.synchronize()
                timer.do_flush("clean")
                run()
                torch.cuda.synchronize()
                assert lib.rk_probe_read(host.ctypes.data, host.nbytes) == 0
                st = host.reshape(-1, 16).copy()
                used = st[:, 0] != 0
                np.save(out / f"{args.tag}ps{ps}_P{prefix}_E{extend}_{shot}.npy", st[used])
            print(f"[{args.tag}] ps={ps} P={prefix} E={extend}: {us:.1f} us, {int(used.sum())} CTAs", flush=True)
            summary.append({"tag": args.tag, "ps": ps, "prefix": prefix, "extend": extend, "us": us})
        del pool
        torch.cuda.empty_cache()
    (out / f"{args.tag}summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
