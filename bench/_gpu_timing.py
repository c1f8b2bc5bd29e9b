"""What the GPU benchmarks (bench/kernels.py, bench/kernels_extend.py) share: the timer with its
L2 flush, and the FlashInfer anchor's import.

L2 flush modes. "write": `flush.zero_()` over 1 GiB. It leaves ~50 MB of DIRTY lines in L2, whose
write-back to HBM then happens inside the timed kernel (for decode at B=1, L=32768, 134 MB of KV,
that is ~50 MB of extra write traffic inside a ~50 µs measurement, on both sides). "clean" (the
default): the same write, then a read of a separate 256 MB buffer, which evicts the dirty lines
before the timed region and leaves L2 holding clean, unrelated data: the state after the
weight-streaming GEMMs (reads) that precede an attention call in a serving loop. Every side of a
comparison is timed with the same flush in the same run.

Torch is imported when a Timer is made, so the scripts' --plot paths work without it.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any, Callable, Optional

FLUSH_MODES = ("clean", "write")


class Timer:
    """Median time (µs) of calls, each after an L2 flush (FLUSH_MODES), with CUDA events; calls
    are CUDA-graph replays by default (launch overhead as in a captured decode step)."""

    def __init__(self, flush_bytes: int = 1 << 30, clean_bytes: int = 256 << 20):
        import torch  # noqa: PLC0415

        self.torch = torch
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        # Read by the "clean" flush: bf16 so torch.sum streams it once.
        self.clean = torch.ones(clean_bytes // 2, dtype=torch.bfloat16, device="cuda")

    def do_flush(self, mode: str) -> None:
        self.flush.zero_()
        if mode == "clean":
            self.torch.sum(self.clean, dtype=self.torch.float32)
        elif mode != "write":
            raise ValueError(f"flush mode {mode!r} (known: {FLUSH_MODES})")

    def graph(self, fn: Callable[[], Any]) -> Any:
        torch = self.torch
        fn()  # warm: builds, workspaces, plans
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g

    def __call__(self, fn: Callable[[], Any], reps: int, use_graph: bool = True,
                 flush: str = "clean", warmup: int = 3) -> float:
        torch = self.torch
        run: Callable[[], Any] = fn
        if use_graph:
            g = self.graph(fn)
            run = g.replay
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.do_flush(flush)
            starts[i].record()
            run()
            ends[i].record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    def interleaved(self, fns: dict[str, Callable[[], Any]], reps: int, use_graph: bool = True,
                    flush: str = "clean", warmup: int = 3) -> dict[str, float]:
        """Median time (µs) of each of ``fns``, timed in turns: rep i calls every one of them once,
        each after its own flush, starting with the (i mod n)-th. Compared kernels thus meet the
        same clocks: over a run of heavy calls the GPU's clocks drift down, so timing one
        kernel's reps before the next's favours whichever goes first (by 3-6% on the 2.4 ms extend
        cells of bench/kernels_extend.py: bench/NOTES.md, session 21)."""
        torch = self.torch
        names = list(fns)
        graphs = {n: self.graph(f) for n, f in fns.items()} if use_graph else {}
        runs = {n: (graphs[n].replay if use_graph else fns[n]) for n in names}
        for n in names:
            for _ in range(warmup):
                runs[n]()
        torch.cuda.synchronize()
        events: dict[str, list[tuple[Any, Any]]] = {n: [] for n in names}
        for i in range(reps):
            for j in range(len(names)):
                n = names[(i + j) % len(names)]
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                self.do_flush(flush)
                start.record()
                runs[n]()
                end.record()
                events[n].append((start, end))
        torch.cuda.synchronize()
        return {n: 1e3 * statistics.median(s.elapsed_time(e) for s, e in events[n]) for n in names}


def load_flashinfer(tag: str) -> Optional[Any]:
    """The flashinfer module (on PYTHONPATH as bench/README.md describes), or None."""
    try:
        import flashinfer  # noqa: PLC0415

        return flashinfer
    except Exception as exc:  # noqa: BLE001
        print(f"[{tag}] FlashInfer unavailable ({exc}); its ratios are skipped", file=sys.stderr)
        return None
