"""Profile target for Nsight Compute: radixkv decode on one cell of bench/kernels_fp8.py, with the
bf16 cache or its FP8 (e4m3) copy. Runs the decode `--calls` times (ncu picks one launch by name);
without ncu it prints the median time of graph-free calls as a sanity line.

    python3 bench/lab/fp8_ncu.py --kv e4m3 --batch 64 --length 32768 --page 16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels_fp8 import Pools, radixkv_decode  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", choices=("bf16", "e4m3"), default="e4m3")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=32768)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--calls", type=int, default=4)
    a = ap.parse_args()
    pools = Pools(a.batch * a.length + a.page * 64)
    c = pools.cell(a.batch, a.length, a.page, seed=1)
    fp8 = a.kv == "e4m3"
    k, v = pools.view(a.page, fp8)
    fn = radixkv_decode(k, v, c, (pools.k_scale, pools.v_scale) if fp8 else None)
    times = []
    for _ in range(a.calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    print(f"[fp8_ncu] kv={a.kv} B={a.batch} L={a.length} page={a.page}: "
          f"{sorted(times)[len(times) // 2]:.1f} us median of {a.calls} (warm L2)")


if __name__ == "__main__":
    main()
