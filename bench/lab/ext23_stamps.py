"""Per-slot time line of the persistent extend_ws instance (a lab probe, session 23).

Needs a library built from a hip/ with bench/lab/ext23_probe.patch (clock64 stamps per (CTA, slot)
in a device buffer, read by rk_probe_read). Words per (CTA, slot): producer (thread 0) 0 slot
start, 1 resolved and published, 2 Q copies issued, 11 tile 0's page entry in hand, 3 tile 0's
copies issued, 4 every copy of the slot issued; consumer 0 (its thread 0) 5 slot info read, 6 Q
fragments in registers, 7 first tile's softmax done, 8 last product done, 9 output stored; 10 the
slot's K/V tile count; 12 consumer 1's output stored; slot 0 also 13 CTA entry, 14 smid |
globaltimer << 8.

Usage (GPU machine): RADIXKV_PREBUILT_LIB=probe.so PYTHONPATH=python python3
    bench/lab/ext23_stamps.py --cells 1:tiny,1:0:512 [--max-kv 0] --out DIR
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

CTAS, SLOTS = 256, 32
GHZ = 1.7  # cycles -> µs (the H200's SM clock under load, 1.63-1.78 GHz in session 20)


def runner(cell: str, max_kv):
    parts = cell.split(":")
    ps = int(parts[0])
    if len(parts) == 2:
        i, groups = next((i, g) for i, (n, g) in enumerate(ke.RAGGED) if n == parts[1])
        specs = ke.ragged_specs(groups, 5 + i)
        pages = sum(-(-(pp + e) // ps) for pp, e in specs)
        pool = ke.Pool(ps, 0, seed=i, num_pages=int(pages * 1.25) + 1)
        c = pool.batch(specs, 5 + i)
    else:
        prefix, extend = int(parts[1]), int(parts[2])
        specs = [(prefix, extend)] * ke.BATCH
        pool = ke.Pool(ps, prefix + extend)
        c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
    bound = max_kv if max_kv is not None else max(pp + e for pp, e in specs)
    return pool, ke.radixkv_runner(pool, c, max(e for _, e in specs), bound, specs)


def summarise(st: np.ndarray) -> dict:
    """st: [CTAS, SLOTS, 16] uint64. Medians (µs) over steady-state slots (neither a CTA's first
    nor its last)."""
    s = st.astype(np.int64)
    used = s[:, :, 0] != 0
    rows = []
    for b in range(s.shape[0]):
        n = int(used[b].sum())
        for i in range(1, n - 1):
            x, prev = s[b, i], s[b, i - 1]
            if x[5] == 0 or x[9] == 0 or prev[9] == 0:
                continue
            rows.append({
                "p_resolve": x[1] - x[0], "p_q": x[2] - x[1], "p_page": x[11] - x[2],
                "p_t0": x[3] - x[11],
                "p_slot": x[4] - x[0], "p_ahead_of_c": x[5] - x[2],
                "c_wait_info": x[5] - prev[9], "c_q": x[6] - x[5], "c_first": x[7] - x[6],
                "c_loop": x[8] - x[7], "c_epi": x[9] - x[8], "c_slot": x[9] - prev[9],
                "tiles": x[10] * GHZ * 1e3,  # a count: summarised as the others, then divided back
            })
    if not rows:
        return {}
    keys = rows[0].keys()
    medians = {k: float(np.median([r[k] for r in rows])) / (GHZ * 1e3) for k in keys}
    return medians | {"n": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", required=True)
    ap.add_argument("--max-kv", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from radixkv.ops import loader

    loader.load()
    lib = ctypes.CDLL(os.environ["RADIXKV_PREBUILT_LIB"])
    lib.rk_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    host = np.zeros(CTAS * SLOTS * 16, dtype=np.uint64)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = ke.Timer()
    for cell in args.cells.split(","):
        pool, run = runner(cell, args.max_kv)
        us = timer(run, reps=30)
        assert lib.rk_probe_clear() == 0
        torch.cuda.synchronize()
        timer.do_flush("clean")
        run()
        torch.cuda.synchronize()
        assert lib.rk_probe_read(host.ctypes.data, host.nbytes) == 0
        st = host.reshape(CTAS, SLOTS, 16).copy()
        np.save(out / f"{cell.replace(':', '_')}.npy", st)
        sm = summarise(st)
        slots = int((st[:, :, 0] != 0).sum(1).max())
        print(f"{cell} {us:.1f} us, up to {slots} slots per CTA; medians (µs): "
              + " ".join(f"{k}={v:.2f}" for k, v in sm.items()), flush=True)
        del pool, run
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
