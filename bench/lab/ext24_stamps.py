"""Per-CTA time line of the two-CTA extend kernel in rank order (a lab probe, session 24).

Needs a library built from a hip/ with bench/lab/ext24_probe.patch (thread 0 of each CTA stamps
clock64 at: 0 entry, 1 tile span known (plan entry and request metadata in hand), 2 first K/V row
table published (page entries in hand), 3 Q and K/V tile 0 landed (after the first barrier of the
loop), 4 last tile's products done, 5 its output stores issued; 6 / 7 globaltimer at entry / after
the stores; 8 SM id; 9 the CTA's K/V tile count).

Usage (GPU machine): RADIXKV_PREBUILT_LIB=probe.so PYTHONPATH=python python3
    bench/lab/ext24_stamps.py --cells 1:0:128,16:0:128 --out DIR
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
import kernels_extend as ke  # noqa: E402

CTAS, WORDS = 1024, 16
PHASES = ("meta", "pages", "landed", "loop", "epilogue")


def analyse(st: np.ndarray) -> str:
    s = st.astype(np.int64)
    used = s[:, 0] != 0
    s = s[used]
    cyc = s[:, 5] - s[:, 0]
    ns = s[:, 7] - s[:, 6]
    ghz = float(np.median(cyc[ns > 2000] / ns[ns > 2000])) if (ns > 2000).any() else 1.7
    ph = np.stack([s[:, k + 1] - s[:, k] for k in range(5)], 1) / (ghz * 1e3)  # µs
    t0 = s[:, 6].min()
    entry = (s[:, 6] - t0) / 1e3
    end = (s[:, 7] - t0) / 1e3
    lines = [f"{len(s)} CTAs, clock {ghz:.2f} GHz; entry spread {entry.max():.2f} µs; "
             f"ends: median {np.median(end):.2f}, max {end.max():.2f} µs after the first entry"]
    for nt in sorted(set(s[:, 9].tolist())):
        m = s[:, 9] == nt
        med = np.median(ph[m], 0)
        lines.append(f"  {int(m.sum())} CTAs of {nt} tiles: " + " ".join(f"{k}={v:.2f}" for k, v in zip(PHASES, med))
                     + f" total={np.median(ph[m].sum(1)):.2f} end={np.median(end[m]):.2f} (max {end[m].max():.2f})")
    last = np.argsort(end)[-5:]
    for i in last:
        lines.append(f"  late CTA (sm {s[i, 8]}, {s[i, 9]} tiles): entry {entry[i]:.2f} end {end[i]:.2f} "
                     + " ".join(f"{k}={v:.2f}" for k, v in zip(PHASES, ph[i])))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-plan", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    lib = ctypes.CDLL(os.environ["RADIXKV_PREBUILT_LIB"])
    lib.rk_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    host = np.zeros(CTAS * WORDS, dtype=np.uint64)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = ke.Timer()
    for cell in args.cells.split(","):
        ps, prefix, extend = (int(x) for x in cell.split(":"))
        pool = ke.Pool(ps, 6144)
        c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
        run = ke.radixkv_runner(pool, c, extend, prefix + extend, [(prefix, extend)] * ke.BATCH,
                                plan=not args.no_plan)
        us = timer(run, reps=30)
        print(f"{cell} {us:.2f} us (graph replays, median of 30)", flush=True)
        for r in range(args.repeats):
            assert lib.rk_probe_clear() == 0
            torch.cuda.synchronize()
            timer.do_flush("clean")
            run()
            torch.cuda.synchronize()
            assert lib.rk_probe_read(host.ctypes.data, host.nbytes) == 0
            st = host.reshape(CTAS, WORDS).copy()
            np.save(out / f"{cell.replace(':', '_')}_{r}.npy", st)
            print(f"-- {cell} run {r}\n" + analyse(st), flush=True)
        del pool, run
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
