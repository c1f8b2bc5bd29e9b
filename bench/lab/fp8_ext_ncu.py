"""Profile target for Nsight Compute: radixkv extend on one cell of bench/kernels_extend.py with the
bf16 cache or its FP8 (e4m3) copy (as bench/kernels_fp8.py builds it). Runs the call `--calls`
times (ncu picks one launch by name) and prints their median time.

    python3 bench/lab/fp8_ext_ncu.py --kv e4m3 --prefix 4096 --extend 512 --page 16
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
    ap.add_argument("--kv", choices=("bf16", "e4m3"), default="e4m3")
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--extend", type=int, default=512)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--max-kv", action="store_true", help="pass the cell's length as max_kv_len")
    ap.add_argument("--calls", type=int, default=4)
    a = ap.parse_args()
    from radixkv import ops  # noqa: PLC0415

    pool = ke.Pool(a.page, a.prefix + a.extend)
    k, v, kw = pool.k, pool.v, {}
    if a.kv == "e4m3":
        ks = (pool.k.float().abs().amax() / 448.0).reshape(())
        vs = (pool.v.float().abs().amax() / 448.0).reshape(())
        k = torch.empty(pool.k.shape, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        v = torch.empty_like(k)
        flat = pool.k.shape[0] * a.page
        h, d = pool.k.shape[-2], pool.k.shape[-1]
        slots = torch.arange(flat, dtype=torch.int32, device="cuda")
        ops.store_kv(k.view(flat, 1, h, d), v.view(flat, 1, h, d), pool.k.view(flat, h, d),
                     pool.v.view(flat, h, d), slots, k_scale=ks, v_scale=vs)
        kw = {"k_scale": ks, "v_scale": vs}
    c = pool.cell(a.prefix, a.extend, seed=1)
    out = torch.empty_like(c["q"])
    times = []
    for _ in range(a.calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        ops.extend_attention(c["q"], k, v, c["qo_indptr"], c["kv_indptr"], c["kv_indices"],
                             c["kv_lens"], out=out, max_q_len=a.extend,
                             max_kv_len=(a.prefix + a.extend) if a.max_kv else None, **kw)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    print(f"[fp8_ext_ncu] kv={a.kv} P={a.prefix} E={a.extend} page={a.page}: "
          f"{sorted(times)[len(times) // 2]:.1f} us median of {a.calls} (warm L2)")


if __name__ == "__main__":
    main()
