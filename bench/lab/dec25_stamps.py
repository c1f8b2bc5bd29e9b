"""Per-block time line of the matrix-unit decode kernel (a lab probe, session 25).

Needs a library built from a hip/ edited by bench/lab/dec25_probe.py (its docstring lists the
stamps). Runs B=1 cells of bench/kernels.py after the clean flush, one graph replay per repeat,
and prints per block group (request, KV head): when each block's loop ended, the gaps between the
last and second-to-last, and the phases of the merge.

Usage (GPU machine): RADIXKV_PREBUILT_LIB=probe.so PYTHONPATH=python python3
    bench/lab/dec25_stamps.py --cells 1:32768,16:32768 --out DIR
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels as kb  # noqa: E402

kb.torch = torch
BLOCKS, WORDS = 1024, 32


def analyse(st: np.ndarray) -> str:
    s = st.astype(np.int64)
    s = s[s[:, 0] != 0]
    cyc = s[:, 6] - s[:, 0]
    ns = s[:, 9] - s[:, 8]
    long = ns > 3000
    ghz = float(np.median(cyc[long] / ns[long])) if long.any() else 1.75
    us = lambda a, b: (s[:, b] - s[:, a]) / (ghz * 1e3)  # noqa: E731
    t0 = s[:, 8].min()
    entry = (s[:, 8] - t0) / 1e3
    at = lambda k: entry + us(0, k)  # noqa: E731  (µs after the first entry, by this block's clock)
    end = (s[:, 9] - t0) / 1e3
    med = lambda a: float(np.median(a))  # noqa: E731
    lines = [f"{len(s)} blocks, {ghz:.2f} GHz; entry spread {entry.max():.2f}; exits median {med(end):.2f} "
             f"max {end.max():.2f} µs",
             f"  phases (median / max µs): meta {med(us(0, 1)):.2f}/{us(0, 1).max():.2f}, first tile "
             f"{med(us(1, 2)):.2f}/{us(1, 2).max():.2f}, loop {med(us(2, 3)):.2f}/{us(2, 3).max():.2f} "
             f"(min {us(2, 3).min():.2f}), store+fence {med(us(3, 4)):.2f}/{us(3, 4).max():.2f}, "
             f"ticket {med(us(4, 5)):.2f}/{us(4, 5).max():.2f}"]
    w = s[:, 16:24]
    nw = int((w[0] != 0).sum())
    if nw:
        w = (w[:, :nw] - s[:, :1]) / (ghz * 1e3)  # µs after the block's entry
        spread = w.max(1) - w.min(1)
        lines.append(f"  warps' loop ends within a block: spread median {med(spread):.2f} max {spread.max():.2f} µs; "
                     f"block loop end - mean warp end: median {med(w.max(1) - w.mean(1)):.2f}")
        for i in np.argsort(at(3))[-4:]:
            lines.append(f"    late block (unit {s[i, 11]}, head {s[i, 12]}): warp ends {np.round(w[i], 2).tolist()}")
    last = s[:, 13] == 1
    if last.any():
        lines.append(f"  merge of the last blocks: {np.round(us(5, 6)[last], 2).tolist()}")
        lines.append(f"    (m, l) landed {np.round(us(5, 7)[last], 2).tolist()}; weights "
                     f"{np.round(us(7, 15)[last], 2).tolist()}; output {np.round(us(15, 6)[last], 2).tolist()}")
    loop_end = at(3)
    groups = {}
    for i in range(len(s)):
        groups.setdefault(int(s[i, 12]), []).append(i)
    gaps, late = [], []
    for g, idx in sorted(groups.items()):
        idx = np.array(idx)
        order = idx[np.argsort(loop_end[idx])]
        if len(order) < 2:
            continue
        a, b = order[-1], order[-2]
        gaps.append(loop_end[a] - loop_end[b])
        # the second-to-last's ticket, against the last's loop end (early check would see it)
        late.append(at(5)[b] - loop_end[a])
        lines.append(f"  head {g}: loop ends {loop_end[idx].min():.2f}..{loop_end[idx].max():.2f}; last - 2nd "
                     f"{gaps[-1]:.2f}; 2nd's ticket - last's loop end {late[-1]:.2f}; merger exit "
                     f"{end[idx][s[idx, 13] == 1].max() if (s[idx, 13] == 1).any() else float('nan'):.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="1:32768,16:32768,1:4096")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    lib = ctypes.CDLL(os.environ["RADIXKV_PREBUILT_LIB"])
    lib.rk_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    host = np.zeros(BLOCKS * WORDS, dtype=np.uint64)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = kb.Timer()
    pool = kb.Pool(32768 + 64 * 16)
    for cell in args.cells.split(","):
        page, length = (int(x) for x in cell.split(":"))
        k, v = pool.view(page)
        c = pool.cell(1, length, page, seed=length + page)
        run = kb.radixkv_runner(k, v, c)
        g = timer.graph(run)
        print(f"ps={page} L={length}: {timer(run, reps=30):.2f} us (graph replays, median of 30)", flush=True)
        for r in range(args.repeats):
            assert lib.rk_probe_clear() == 0
            torch.cuda.synchronize()
            timer.do_flush("clean")
            g.replay()
            torch.cuda.synchronize()
            assert lib.rk_probe_read(host.ctypes.data, host.nbytes) == 0
            st = host.reshape(BLOCKS, WORDS).copy()
            np.save(out / f"stamps_{page}_{length}_{r}.npy", st)
            print(f"-- ps={page} L={length} run {r}\n" + analyse(st), flush=True)


if __name__ == "__main__":
    main()
