"""Lab: decode time against the number of units per request, on small and one-wave batches.

For each cell (page size, B, L, cache dtype bf16 / e4m3) it times ``paged_decode`` with the plan
the product builds (``decode_plan`` with ``decode_slots``) and with plans of ``num_splits`` = 1, 2, 4, ...
(every request cut into that many equal units), under bench/_gpu_timing.py's timer (graph
replays after the clean L2 flush, median). The question: does the plan's cost model
(rust/radixkv-core/src/metadata/plan.rs: tokens per slot plus a fixed cost per unit) pick the
fastest split where the kernel is latency-bound (B = 1, short L), and on the one-wave cells?

Usage (GPU machine, after bench/gpu_env.sh): PYTHONPATH=python python3 bench/lab/plan_sweep.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _gpu_timing import Timer  # noqa: E402
from kernels_fp8 import H_KV, H_Q, Pools  # noqa: E402

CELLS = [(1, 256), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (1, 32768),
         (2, 300), (4, 512), (4, 1024), (4, 2048), (4, 8192), (8, 256), (8, 512), (16, 512),
         (16, 2048), (16, 32768)]
SPLITS = (1, 2, 3, 4, 8, 16, 32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--cells", default=None, help="B:L,... instead of CELLS")
    ap.add_argument("--splits", default=None, help="units per request to try, e.g. 16,32,33")
    ap.add_argument("--bf16-only", action="store_true")
    args = ap.parse_args()
    cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")] if args.cells else CELLS
    splits = tuple(int(x) for x in args.splits.split(",")) if args.splits else SPLITS
    from radixkv import _core, ops  # noqa: PLC0415

    timer = Timer()
    pools = Pools(max(b * l for b, l in cells) + 64 * 16)
    scales = (pools.k_scale, pools.v_scale)
    slots = ops.decode_slots(H_Q, H_KV)
    rows = []
    for page in (1, 16):
        for fp8 in (False,) if args.bf16_only else (False, True):
            k, v = pools.view(page, fp8)
            for batch, length in cells:
                c = pools.cell(batch, length, page, seed=batch * 7919 + length + page)
                out = torch.empty_like(c["q"])
                kw = {"k_scale": scales[0], "v_scale": scales[1]} if fp8 else {}
                lens = [length] * batch
                plan = ops.decode_plan(lens, page, slots, device="cuda")
                _, info_units, info_chunk = _core.build_decode_plan(
                    torch.tensor(lens, dtype=torch.int64).numpy(), page, slots=slots)
                row = {"page": page, "dtype": "e4m3" if fp8 else "bf16", "batch": batch,
                       "kv_len": length, "plan_units": int(info_units), "plan_chunk": int(info_chunk)}

                def run(**extra):
                    return lambda: ops.paged_decode(c["q"], k, v, c["kv_indptr"], c["kv_indices"],
                                                    c["kv_lens"], out=out, **kw, **extra)

                row["plan_us"] = timer(run(plan=plan), args.reps)
                ref = run(plan=plan)().float()
                for s in splits:
                    if length // s < 64:
                        continue
                    fn = run(plan=ops.decode_plan(lens, page, num_splits=s, device="cuda"))
                    row[f"s{s}_us"] = timer(fn, args.reps)
                    got = fn().float()
                    row[f"s{s}_err"] = float((got - ref).norm() / ref.norm())
                best = min((row[f"s{s}_us"], s) for s in splits if f"s{s}_us" in row)
                row["best_splits"], row["best_us"] = best[1], best[0]
                rows.append(row)
                cols = " ".join(f"s{s}={row[f's{s}_us']:.1f}" for s in splits if f"s{s}_us" in row)
                print(f"ps={page:>2} {row['dtype']} B={batch:>2} L={length:>5} plan({row['plan_units']} units)"
                      f"={row['plan_us']:.1f} | {cols} | best s{best[1]} {best[0]:.1f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan_sweep.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
