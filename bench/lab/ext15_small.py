"""Extend time of chosen cells with a bf16 and an FP8 (e4m3) cache, one library per process (a
probe for session 15's kernel choice on short KV, not a benchmark): the cells of
bench/kernels_extend.py's workload (8 requests, 32/8 heads, D = 128) given as ps:P:E, timed as
kernels_extend times them (clean L2 flush before each call, median), op called directly.

Usage (GPU machine): RADIXKV_PREBUILT_LIB=... PYTHONPATH=python python3 bench/lab/ext15_small.py \
    --cells 1:0:128,16:0:128 [--max-kv]
``--max-kv``: pass the cell's KV length as the max_kv_len hint (when the op takes one).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", required=True)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--max-kv", action="store_true")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    from radixkv import ops
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")]
    for ps in sorted({c[0] for c in cells}):
        mine = [c for c in cells if c[0] == ps]
        pool = ke.Pool(ps, max(p + e for _, p, e in mine))
        ks = (pool.k.float().abs().amax() / 448.0).reshape(())
        vs = (pool.v.float().abs().amax() / 448.0).reshape(())
        k8 = torch.empty(pool.k.shape, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        v8 = torch.empty_like(k8)
        flat = pool.k.shape[0] * ps
        slots = torch.arange(flat, dtype=torch.int32, device="cuda")
        ops.store_kv(k8.view(flat, 1, ke.H_KV, ke.D), v8.view(flat, 1, ke.H_KV, ke.D),
                     pool.k.view(flat, ke.H_KV, ke.D), pool.v.view(flat, ke.H_KV, ke.D), slots,
                     k_scale=ks, v_scale=vs)
        for _, prefix, extend in mine:
            c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
            args_ = (c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["kv_lens"])
            hint = {"max_kv_len": prefix + extend} if args.max_kv else {}
            o16, o8 = torch.empty_like(c["q"]), torch.empty_like(c["q"])

            def bf16(c=c, args_=args_, o16=o16, extend=extend, hint=hint):
                return ops.extend_attention(c["q"], pool.k, pool.v, *args_, out=o16, max_q_len=extend,
                                            check=False, **hint)

            def fp8(c=c, args_=args_, o8=o8, extend=extend, hint=hint):
                return ops.extend_attention(c["q"], k8, v8, *args_, out=o8, max_q_len=extend,
                                            check=False, k_scale=ks, v_scale=vs, **hint)

            t16, t8 = timer(bf16, reps=args.reps), timer(fp8, reps=args.reps)
            ref = ke.reference_out(pool, c, prefix, extend)
            err = float((bf16().float() - ref).norm() / ref.norm())
            print(f"[{args.tag}] ps={ps:>2} P={prefix:>5} E={extend:>5} | bf16 {t16:8.2f} us | "
                  f"fp8 {t8:8.2f} us | err {err:.1e}", flush=True)
        del pool, k8, v8
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
