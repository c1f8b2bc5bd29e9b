"""Both extend kernels on bench/kernels_extend.py's ragged batches (a probe, session 15): the
same batch timed with max_kv_len = its real bound (the product's choice), 0 (unknown: the
warp-specialised kernel on sm_90a) and 1 (a bound below every length: the two-CTA kernel, still
exact), then FlashInfer fa2 / fa3.

Usage (GPU machine): PYTHONPATH=python python3 bench/lab/ext15_ragged_ab.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels_extend as ke  # noqa: E402


def main() -> None:
    from radixkv.ops import loader

    loader.load()
    timer = ke.Timer()
    fi = ke.load_flashinfer()
    ws = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    for ps in (1, 16):
        for i, (name, groups) in enumerate(ke.RAGGED):
            specs = ke.ragged_specs(groups, 5 + i)
            pages = sum(math.ceil((p + e) / ps) for p, e in specs)
            pool = ke.Pool(ps, 0, seed=i, num_pages=int(pages * 1.25) + 1)
            c = pool.batch(specs, 5 + i)
            max_q, max_kv = max(e for _, e in specs), max(p + e for p, e in specs)
            t = {}
            for rnd in range(2):
                for tag, bound in (("bound", max_kv), ("ws", 0), ("two-cta", 1)):
                    t.setdefault(tag, []).append(timer(ke.radixkv_runner(pool, c, max_q, bound), reps=30))
            line = " | ".join(f"{k} {min(v):7.1f}-{max(v):7.1f}" for k, v in t.items())
            for backend in ("fa2", "fa3") if fi is not None else ():
                run = ke.flashinfer_runner(fi, backend, pool, c, ws)
                line += f" | {backend} {timer(run, reps=30):7.1f}"
            print(f"[ragged ab] ps={ps:>2} {name:<10} max_kv={max_kv:>5} | {line}", flush=True)
            del pool, c
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
