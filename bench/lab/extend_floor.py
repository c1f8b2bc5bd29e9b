"""Where the time of extend's smallest cells goes, outside the kernel's own work (a probe, not a
benchmark): an empty torch kernel and radixkv's extend kernel with every L_q = 0, each timed right
after an L2 flush and after the flush plus one untimed launch of the same configuration, then the
small cells of bench/kernels_extend.py the same two ways. bench/NOTES.md (Extend, the fast
prologue) has what it found.

Usage (GPU machine, repository root):  PYTHONPATH=python python3 bench/lab/extend_floor.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels_extend import D, Pool, Timer, radixkv_runner  # noqa: E402


def _timed_after(timer: Timer, fn: Callable[[], Any], pre: Optional[Callable[[], Any]], reps: int) -> float:
    """Median event time (µs) of ``fn`` after a clean L2 flush and, if given, one untimed ``pre``
    call between the flush and the timed call (it leaves the SM's shared-memory carveout and the
    launch path as ``pre`` set them)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        timer.do_flush("clean")
        if pre is not None:
            pre()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return 1e3 * times[len(times) // 2]


def measure_floor(reps: int = 50, page_size: int = 16) -> list[tuple[str, float, float]]:
    """Where the time of the smallest cells goes, outside the kernel's own work. Rows: (what,
    µs right after the flush, µs after the flush plus one untimed launch of a kernel with the
    same launch configuration). "empty extend" is radixkv's kernel with every L_q = 0: 256 CTAs
    of the real shared-memory size that read qo_indptr and exit. The small cells' second column
    puts that empty launch in front (carveout set; note it also brings the request metadata into
    L2)."""
    timer = Timer()
    tiny = torch.zeros(1, device="cuda")
    op = torch.ops.radixkv.extend_attention.default
    pool = Pool(page_size, 512)
    c = pool.cell(0, 128, seed=1)
    empty_qo = torch.zeros_like(c["qo_indptr"])
    out = torch.empty_like(c["q"])
    scale = 1.0 / math.sqrt(D)
    from radixkv.ops import _status  # noqa: PLC0415

    empty_args = (c["q"], pool.k, pool.v, empty_qo, c["kv_indptr"], c["kv_indices"], c["kv_lens"],
                  out, scale, 0, 128, _status.buffer(c["q"].device))

    def empty() -> None:
        op(*empty_args)

    def tiny_fn() -> None:
        tiny.add_(1.0)

    rows = [("tiny torch kernel (1 element)", _timed_after(timer, tiny_fn, None, reps),
             _timed_after(timer, tiny_fn, tiny_fn, reps)),
            ("empty extend (256 CTAs, L_q = 0)", _timed_after(timer, empty, None, reps),
             _timed_after(timer, empty, empty, reps))]
    for extend in (128, 512):
        cc = pool.cell(0, extend, seed=extend + page_size)
        run = radixkv_runner(pool, cc, extend)
        rows.append((f"ps{page_size} P0/E{extend}", _timed_after(timer, run, None, reps),
                     _timed_after(timer, run, empty, reps)))
    for name, a, b in rows:
        print(f"floor | {name:34s} | after flush {a:7.2f} us | after flush + same-config launch {b:7.2f} us",
              flush=True)
    return rows


def main() -> None:
    from radixkv.ops import loader

    loader.load()
    measure_floor()


if __name__ == "__main__":
    main()
