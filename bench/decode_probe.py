"""Where paged decode's time goes, outside the streaming of K and V (tuning build only).

For the cells of bench/kernels.py (page 1 and 16), times with the clean flush of bench/_gpu_timing.py:
  - the floor: an empty Triton kernel; a contiguous Triton read of exactly the cell's KV bytes
    (what a perfect kernel that knew where the bytes are would take);
  - radixkv's decode kernel and its probes (hip/paged_decode_mma.cuh, Probe; run_any's variants):
    4 = copies only, 6 = empty (launch of the same grid), 7 = the dependent chain up to the
    first tiles, 8 = no fused merge; each also compared with the default's output (the probes'
    outputs are wrong by design; a candidate variant's must not be);
  - FlashInfer on the same cell;
  - with RADIXKV_PROBE_COMPACT=1, B = 1 cells again with their pages drawn from a compact region
    of the pool (TLB reach); with RADIXKV_PROBE_SWEEP=v,..., B <= 4 cells at 4 / 8 / 12 / 16
    splits for those variants;
  - five traced replays (variant 9): per-block %globaltimer stamps, the second summarised
    (RADIXKV_PROBE_RAW=1 keeps them all).
Environment: RADIXKV_PROBE_CELLS="1x512,16x4096" (B x L), RADIXKV_PROBE_VARIANTS="name:id,...".
bench/NOTES.md (session 3) holds what these runs found; bench/sm_probe.cu is the companion
standalone CUDA probe of the SMs (cluster capacity, GPC map, per-SM read rate).

usage (GPU machine, RADIXKV_DECODE_VARIANTS=1 build): python3 bench/decode_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels as kb  # noqa: E402
from _gpu_timing import Timer, load_flashinfer  # noqa: E402

kb.torch = torch
CELLS = ((1, 512), (1, 4096), (1, 32768), (16, 512), (16, 4096), (16, 32768), (64, 512), (64, 4096),
         (256, 512), (256, 4096))
if os.environ.get("RADIXKV_PROBE_CELLS"):  # e.g. "1x512,1x32768"
    CELLS = tuple(tuple(int(x) for x in c.split("x")) for c in os.environ["RADIXKV_PROBE_CELLS"].split(","))
# Variants timed (RADIXKV_PROBE_VARIANTS=name:id,... overrides).
PROBES = {"loads": 4, "empty": 6, "chain": 7, "nomerge": 8}
if os.environ.get("RADIXKV_PROBE_VARIANTS"):
    PROBES = {kv.split(":")[0]: int(kv.split(":")[1])
              for kv in os.environ["RADIXKV_PROBE_VARIANTS"].split(",")}


def empty_triton_kernel() -> Callable[[], Any]:
    """A launch that does nothing: the timer's floor."""
    import triton  # noqa: PLC0415

    @triton.jit
    def empty_kernel(out):
        pass

    out = torch.zeros((), dtype=torch.float32, device="cuda")
    return lambda: empty_kernel[(1,)](out)


def trace_summary(stamps: Any, splits: int) -> dict[str, Any]:
    """stamps: int64 [blocks, 8] (hip/paged_decode_mma.cuh, kProbeTrace)."""
    t = stamps.double()
    t0 = float(t[:, 0].min())
    entry, first, loop, stored, merged = ((t[:, k] - t0) / 1e3 for k in range(5))
    done = torch.where(t[:, 4] > 0, merged, stored)
    q = lambda v: [round(float(v.quantile(x)), 2) for x in (0.0, 0.1, 0.5, 0.9, 1.0)]  # noqa: E731
    res = {
        "blocks": int(t.shape[0]),
        "span_us": round(float(done.max()), 2),
        "entry_us_q": q(entry),
        "first_tile_after_entry_us_q": q(first - entry),
        "loop_us_q": q(loop - first),
        "store_us_q": q(stored - loop),
        "done_us_q": q(done),
    }
    if splits > 1:
        m = t[:, 4] > 0
        res["merge_us_q"] = q((merged - stored)[m])
    # Per SM: idle time between one block's end and the next block's entry (multi-wave grids).
    sm = t[:, 5].long()
    gaps = []
    for s in sm.unique():
        rows = (sm == s).nonzero().flatten()
        if rows.numel() < 2:
            continue
        order = entry[rows].argsort()
        e, d = entry[rows][order], done[rows][order]
        gaps += [float(e[i + 1] - d[i]) for i in range(len(order) - 1)]
    if gaps:
        res["sm_gap_us_q"] = [round(x, 2) for x in statistics.quantiles(gaps, n=10)[::4]]
        res["blocks_per_sm_max"] = int(torch.bincount(sm).max())
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--page-sizes", default="1,16")
    args = ap.parse_args()
    from radixkv.ops import loader  # noqa: PLC0415
    from radixkv.ops._api import decode_plan  # noqa: PLC0415

    loader.load()
    timer = Timer()
    empty_fn = empty_triton_kernel()
    fi = load_flashinfer("decode probe")
    fi_ws = torch.empty(1 << 30, dtype=torch.uint8, device="cuda") if fi else None
    floor = timer(empty_fn, 100)
    print(f"[probe] empty triton kernel {floor:.2f} us", flush=True)
    pool = kb.Pool(max(kb.BATCHES) * max(kb.LENGTHS) + 64 * 16)  # as bench/kernels.py: 34 GB
    big = torch.empty(max(b * l for b, l in CELLS) * kb.BYTES_PER_TOKEN // 2, dtype=torch.bfloat16,
                      device="cuda").normal_()
    rows = []
    for page in [int(s) for s in args.page_sizes.split(",")]:
        k, v = pool.view(page)
        for batch, length in CELLS:
            c = pool.cell(batch, length, page, seed=batch * 100003 + length + page)
            nbytes = batch * length * kb.BYTES_PER_TOKEN
            reps = kb.reps_for(nbytes)
            splits = decode_plan(batch, kb.H_Q, kb.H_KV, length)[0]
            row: dict[str, Any] = {"page_size": page, "batch": batch, "kv_len": length,
                                   "splits": splits, "kv_mb": nbytes / 1e6}
            row["stream_us"] = timer(kb._triton_read(big[: nbytes // 2]), reps)  # as kernels.py's same-size read
            ours = kb.radixkv_runner(k, v, c)
            row["radixkv_us"] = timer(ours, reps)
            ref = ours().float().clone()
            for name, var in PROBES.items():
                row[f"{name}_us"] = kb.with_variant(var, lambda: timer(ours, reps))
                got = kb.with_variant(var, ours).float()
                row[f"{name}_err"] = float((got - ref).norm() / ref.norm())
            if fi is not None:
                row["fi_us"] = timer(kb.flashinfer_runner(fi, k, v, page, c, fi_ws), reps)
            sweep_vars = [int(x) for x in os.environ.get("RADIXKV_PROBE_SWEEP", "").split(",") if x]
            if batch <= 4 and sweep_vars:  # split counts x variants, with errors against `ref`
                sw = {}
                for ns in (4, 8, 12, 16):
                    run = kb.radixkv_runner(k, v, c, ns)
                    for var in [0] + sweep_vars:
                        t = kb.with_variant(var, lambda: timer(run, reps)) if var else timer(run, reps)
                        got = (kb.with_variant(var, run) if var else run()).float()
                        sw[f"s{ns}_v{var}"] = (round(t, 2), float((got - ref).norm() / ref.norm()))
                row["split_variant_sweep"] = sw
                print(f"[sweep] B={batch} L={length}: " + ", ".join(
                    f"{k2} {t:.1f} us (err {e:.1e})" for k2, (t, e) in sw.items()), flush=True)
            if batch == 1 and os.environ.get("RADIXKV_PROBE_COMPACT") == "1":
                cc = dict(c)
                n = c["kv_indices"].numel()
                cc["kv_indices"] = torch.randperm(n, device="cuda").to(torch.int32)
                row["compact_radixkv_us"] = timer(kb.radixkv_runner(k, v, cc), reps)
                if fi is not None:
                    row["compact_fi_us"] = timer(kb.flashinfer_runner(fi, k, v, page, cc, fi_ws), reps)
            # One traced replay: stamps live after the partials in a workspace we own.
            blocks = splits * batch * kb.H_KV
            ws_rows = splits * batch * kb.H_Q
            ws = torch.zeros(ws_rows * (kb.D + 2) + blocks * 16 + 16, dtype=torch.float32, device="cuda")
            out = torch.empty_like(c["q"])
            from radixkv import ops  # noqa: PLC0415

            def traced() -> Any:
                return ops.paged_decode(c["q"], k, v, c["kv_indptr"], c["kv_indices"], c["kv_lens"],
                                        out=out, workspace=ws)
            summaries, raw = [], []
            for _ in range(5):
                timer.do_flush("clean")
                kb.with_variant(9, traced)
                torch.cuda.synchronize()
                stamps = ws[ws_rows * (kb.D + 2): ws_rows * (kb.D + 2) + blocks * 16].view(torch.int64)
                summaries.append(trace_summary(stamps.view(blocks, 8).cpu(), splits))
                raw.append(stamps.view(blocks, 8).cpu().tolist())
            row["trace"] = summaries[1]
            if blocks <= 1024 and os.environ.get("RADIXKV_PROBE_RAW") == "1":
                row["trace_raw"] = raw
            rows.append(row)
            print(json.dumps({k2: (round(v2, 2) if isinstance(v2, float) else v2)
                              for k2, v2 in row.items()}), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "decode_probe.json").write_text(json.dumps({"floor_us": floor, "rows": rows}, indent=1))
    names = list(PROBES)
    print("\n| ps | B | L | MB | splits | stream | ours | " + " | ".join(names) + " | FI | compact ours / FI |")
    print("|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(names) + "---:|---|")
    for r in rows:
        comp = (f"{r['compact_radixkv_us']:.1f} / {r.get('compact_fi_us', float('nan')):.1f}"
                if "compact_radixkv_us" in r else "-")
        print(f"| {r['page_size']} | {r['batch']} | {r['kv_len']} | {r['kv_mb']:.0f} | {r['splits']} | "
              f"{r['stream_us']:.1f} | {r['radixkv_us']:.1f} | "
              + " | ".join(f"{r[n + '_us']:.1f}" for n in names)
              + f" | {r.get('fi_us', float('nan')):.1f} | {comp} |")


if __name__ == "__main__":
    main()
