"""Decode-attention benchmark: radixkv.ops.paged_decode against FlashInfer's batch decode.

Workload (issue 4): B in {1, 16, 64, 256} x L in {512, 4096, 32768}; Llama-3-8B attention (32 query
heads, 8 KV heads, head_dim 128); bf16; page sizes 1 and 16. Ragged cells (issue 12, --ragged):
batches of 8, 32, 64 and 256 requests whose lengths are drawn log-uniformly over wide ranges with
fixed seeds (RAGGED below), the same page sizes. K/V live in one large pool filled with
random data; each cell's pages are drawn at random from it (scattered). Every timed call is a
CUDA-graph replay preceded by an L2 flush, timed with CUDA events; the median of many replays is
reported. Both sides (radixkv and FlashInfer) always see the same flush in the same run, and are
timed in turns with the same-size read (each rep calls every one of them once, starting with a
different one: ``Timer.interleaved``), so all meet the same clock drift.

L2 flush modes (bench/_gpu_timing.py): "clean" (the default, the main table) and "write" (the
only one in session 1's runs 1-5, which leaves dirty lines whose write-back lands inside the timed
kernel). The write-flush times are reported too (the "write" columns, all cells), so nothing is
hidden.

Columns: time; achieved bandwidth (bytes of K and V read / time); that bandwidth as a fraction of a
read-only stream and of a device-to-device copy (read + write bytes / time), both measured in the
same run; FlashInfer's time and the ratio FlashInfer time / radixkv time (> 1: radixkv faster).
For cells under ~1.2 GB also "same-size read": the time of a contiguous read-only stream of exactly
the cell's KV bytes under the same timer and flush (launch, ramp-up and tail included): the floor
for any kernel that must read those bytes, against which the small cells' times can be judged.
FlashInfer is called as the benchmark kit's anchors/README.md records (BatchDecodeWithPagedKVCacheWrapper,
"NHD", use_tensor_cores=True). If bench/kernels_extend.py is present its extend section runs after.

The radixkv side passes the work plan built on the host (ops.decode_plan) when the package has
one, so no timed call reads lengths back; with an older package (no plan) it calls paged_decode as
that package expects, so the same script times both (bench/lab/gpu_decode12.sh).

Usage (GPU machine):  PYTHONPATH=python python3 bench/kernels.py --out $OUT [--ragged]
Re-plot a fetched JSON:  python bench/kernels.py --plot bench/results/paged_decode.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_timing import Timer, load_flashinfer  # noqa: E402

H_Q, H_KV, D = 32, 8, 128
BATCHES = (1, 16, 64, 256)
LENGTHS = (512, 4096, 32768)
PAGE_SIZES = (1, 16)
# Ragged cells: (batch, shortest, longest, seed); lengths log-uniform in [shortest, longest].
RAGGED = ((8, 256, 32768, 81), (32, 16, 65536, 82), (64, 256, 32768, 83), (256, 16, 8192, 84))
BYTES_PER_TOKEN = H_KV * D * 2 * 2  # K and V, bf16

torch: Any = None  # imported in main() so --plot works without torch


def stream_ceilings(timer: Timer, nbytes: int = 4 << 30) -> dict[str, float]:
    """Read-only stream and device copy bandwidth in TB/s (best of a few ways to read)."""
    x = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    reads = {
        "sum": lambda: torch.sum(x, dtype=torch.float32),
        "amax": lambda: torch.amax(x),
    }
    try:
        reads["triton"] = _triton_read(x)
    except Exception as exc:  # noqa: BLE001
        print(f"[decode bench] triton read stream unavailable: {exc}", file=sys.stderr)
    res = {}
    for name, fn in reads.items():
        try:
            res[f"read_{name}"] = nbytes / (timer(fn, reps=20, use_graph=False) * 1e-6) / 1e12
        except Exception as exc:  # noqa: BLE001
            print(f"[decode bench] read '{name}' failed: {exc}", file=sys.stderr)
    res["read"] = max(v for k, v in res.items() if k.startswith("read_"))
    res["copy"] = 2 * nbytes / (timer(lambda: y.copy_(x), reps=20, use_graph=False) * 1e-6) / 1e12
    del x, y
    torch.cuda.empty_cache()
    return res


_read_kernel: Any = None  # the Triton read-stream kernel, defined (and compiled) once


def _triton_read(x: Any) -> Callable[[], Any]:
    """A call that streams all of bf16 ``x`` once (grid-stride, 8 programs per SM)."""
    global _read_kernel
    if _read_kernel is None:
        import triton  # noqa: PLC0415
        import triton.language as tl  # noqa: PLC0415

        @triton.jit
        def read_kernel(p, out, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            step = tl.num_programs(0) * BLOCK
            for start in range(pid * BLOCK, n, step):
                offs = start + tl.arange(0, BLOCK)
                acc += tl.load(p + offs, mask=offs < n, other=0.0).to(tl.float32)
            tl.atomic_add(out, tl.sum(acc, 0))

        _read_kernel = read_kernel
    import torch as th  # noqa: PLC0415 (the module global is set only by main())

    n = x.numel()
    out = th.zeros((), dtype=th.float32, device="cuda")
    grid = (th.cuda.get_device_properties(0).multi_processor_count * 8,)
    kernel = _read_kernel
    return lambda: kernel[grid](x, out, n, BLOCK=4096, num_warps=8)


class Pool:
    """One K and one V pool of `tokens` slots, random bf16; viewed with any page size."""

    def __init__(self, tokens: int, seed: int = 0):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.tokens = tokens
        self.k = torch.randn(tokens * H_KV * D, dtype=torch.bfloat16, device="cuda", generator=gen)
        self.v = torch.randn(tokens * H_KV * D, dtype=torch.bfloat16, device="cuda", generator=gen)

    def view(self, page: int) -> tuple[Any, Any]:
        shape = (self.tokens // page, page, H_KV, D)
        return self.k.view(shape), self.v.view(shape)

    def ragged_cell(self, lens: list[int], page: int, seed: int) -> dict[str, Any]:
        """A batch of requests of `lens` tokens on scattered pages of this pool."""
        per_req = [-(-n // page) for n in lens]
        gen = torch.Generator(device="cuda").manual_seed(seed)
        pages = torch.randperm(self.tokens // page, device="cuda", generator=gen)[: sum(per_req)]
        indptr = [0]
        for n in per_req:
            indptr.append(indptr[-1] + n)
        dev = dict(device="cuda", dtype=torch.int32)
        return {
            "q": torch.randn(len(lens), H_Q, D, dtype=torch.bfloat16, device="cuda", generator=gen),
            "kv_indptr": torch.tensor(indptr, **dev),
            "kv_indices": pages.to(torch.int32),
            "kv_lens": torch.tensor(lens, **dev),
            "kv_last_page_len": torch.tensor([(n - 1) % page + 1 for n in lens], **dev),
            "host_lens": list(lens),
            "page": page,
        }

    def cell(self, batch: int, length: int, page: int, seed: int) -> dict[str, Any]:
        per_req = -(-length // page)
        num_pages = self.tokens // page
        gen = torch.Generator(device="cuda").manual_seed(seed)
        pages = torch.randperm(num_pages, device="cuda", generator=gen)[: batch * per_req]
        indptr = torch.arange(0, batch + 1, device="cuda", dtype=torch.int32) * per_req
        last = (length - 1) % page + 1
        return {
            "q": torch.randn(batch, H_Q, D, dtype=torch.bfloat16, device="cuda", generator=gen),
            "kv_indptr": indptr,
            "kv_indices": pages.to(torch.int32),
            "kv_lens": torch.full((batch,), length, dtype=torch.int32, device="cuda"),
            "kv_last_page_len": torch.full((batch,), last, dtype=torch.int32, device="cuda"),
            "host_lens": [length] * batch,
            "page": page,
        }


def flashinfer_runner(fi: Any, k: Any, v: Any, page: int, c: dict[str, Any],
                      workspace: Any) -> Callable[[], Any]:
    w = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)
    w.plan(c["kv_indptr"], c["kv_indices"], c["kv_last_page_len"], H_Q, H_KV, D, page,
           pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    out = torch.empty_like(c["q"])
    return lambda: w.run(c["q"], (k, v), out=out)


def _has_plan() -> bool:
    from radixkv import ops  # noqa: PLC0415

    return hasattr(ops, "decode_slots")


def radixkv_runner(k: Any, v: Any, c: dict[str, Any], num_splits: Optional[int] = None
                   ) -> Callable[[], Any]:
    """A timed call of paged_decode on cell `c`: with this package's work plan built once on the
    host (so graph capture sees no sync), or, with an older package, its own split choice."""
    from radixkv import ops  # noqa: PLC0415

    out = torch.empty_like(c["q"])
    if _has_plan():
        if num_splits is None:
            plan = ops.decode_plan(c["host_lens"], c["page"], ops.decode_slots(H_Q, H_KV),
                                   device="cuda")
        else:
            plan = ops.decode_plan(c["host_lens"], c["page"], num_splits=num_splits, device="cuda")
        return lambda: ops.paged_decode(c["q"], k, v, c["kv_indptr"], c["kv_indices"],
                                        c["kv_lens"], out=out, plan=plan)
    return lambda: ops.paged_decode(c["q"], k, v, c["kv_indptr"], c["kv_indices"], c["kv_lens"],
                                    out=out, num_splits=num_splits)


def work_note(c: dict[str, Any]) -> str:
    """How radixkv cuts this cell: work units and chunk (plan), or the older split count."""
    lens = c["host_lens"]
    if _has_plan():
        from radixkv import _core, ops  # noqa: PLC0415

        _, units, chunk = _core.build_decode_plan(lens, c["page"], slots=ops.decode_slots(H_Q, H_KV))
        return f"{units}u/{chunk}t"
    try:
        from radixkv.ops._api import decode_plan  # noqa: PLC0415

        return f"{decode_plan(len(lens), H_Q, H_KV, sum(lens) // len(lens))[0]}s"
    except Exception:  # noqa: BLE001
        return "?"


def reps_for(nbytes: int) -> int:
    return 30 if nbytes > (2 << 30) else 60 if nbytes > (64 << 20) else 100


def ragged_lens(batch: int, lo: int, hi: int, seed: int) -> list[int]:
    """`batch` lengths log-uniform in [lo, hi] (a fixed seed per cell)."""
    import random  # noqa: PLC0415

    rng = random.Random(seed)
    return [int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))) for _ in range(batch)]


def run_decode_bench(out_dir: Optional[Path], batches=BATCHES, lengths=LENGTHS,
                     page_sizes=PAGE_SIZES, sweep: bool = True,
                     write_column: bool = True, uniform: bool = True,
                     ragged: bool = False) -> dict[str, Any]:
    from radixkv.ops import loader  # noqa: PLC0415

    t0 = time.time()
    loader.load()
    print(f"[decode bench] extension ready in {time.time() - t0:.1f} s", flush=True)
    timer = Timer()
    ceil = stream_ceilings(timer)
    print(f"[decode bench] read stream {ceil['read']:.2f} TB/s, copy {ceil['copy']:.2f} TB/s "
          f"({ {k: round(v, 2) for k, v in ceil.items()} })", flush=True)
    fi = load_flashinfer("decode bench")
    fi_ws = torch.empty(1 << 30, dtype=torch.uint8, device="cuda") if fi else None
    # The same-size contiguous read: a slice of one buffer per cell (cells up to its size).
    same_elems = min(max(batches) * max(lengths), 1 << 18) * BYTES_PER_TOKEN // 2
    same = torch.empty(same_elems, dtype=torch.bfloat16, device="cuda").normal_()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pool = Pool(max(batches) * max(lengths) + 64 * 16)
    rows: list[dict[str, Any]] = []
    def cells(page: int) -> Any:
        if uniform:
            for batch in batches:
                for length in lengths:
                    yield (batch, length, None,
                           pool.cell(batch, length, page, seed=batch * 100003 + length + page))
        if ragged:
            for batch, lo, hi, seed in RAGGED:
                lens = ragged_lens(batch, lo, hi, seed)
                yield batch, sum(lens) // batch, f"{lo}-{hi}", pool.ragged_cell(lens, page, seed + page)

    for page in page_sizes:
        k, v = pool.view(page)
        for batch, length, spread, c in cells(page):
                nbytes = sum(c["host_lens"]) * BYTES_PER_TOKEN
                reps = reps_for(nbytes)
                ours = radixkv_runner(k, v, c)
                row: dict[str, Any] = {
                    "page_size": page, "batch": batch, "kv_len": length, "kv_bytes": nbytes,
                    "num_splits": work_note(c),
                }
                if spread is not None:
                    row["ragged"] = spread  # kv_len is then the mean length
                sides: dict[str, Any] = {"radixkv": ours}
                if nbytes // 2 <= same_elems:
                    try:
                        sides["read_same"] = _triton_read(same[: nbytes // 2])
                    except Exception as exc:  # noqa: BLE001
                        print(f"[decode bench] same-size read failed: {exc}", file=sys.stderr)
                if fi is not None:
                    try:
                        run = flashinfer_runner(fi, k, v, page, c, fi_ws)
                        ref = run().float()
                        mine = ours().float()
                        row["rel_err_vs_flashinfer"] = float((mine - ref).norm() / ref.norm())
                        sides["flashinfer"] = run
                    except Exception as exc:  # noqa: BLE001
                        row["flashinfer_error"] = repr(exc)[:300]
                try:
                    timed = timer.interleaved(sides, reps)
                except Exception as exc:  # noqa: BLE001 (an anchor that cannot be captured)
                    row["timing_error"] = repr(exc)[:300]
                    sides = {"radixkv": ours}
                    timed = {"radixkv": timer(ours, reps)}
                row.update({f"{n}_us": t for n, t in timed.items()})
                if write_column or (batch, length) == (1, 32768):
                    pair = {n: f for n, f in sides.items() if n != "read_same"}
                    row.update({f"{n}_write_us": t
                                for n, t in timer.interleaved(pair, reps, flush="write").items()})
                row["tbps"] = nbytes / (row["radixkv_us"] * 1e-6) / 1e12
                row["frac_read"] = row["tbps"] / ceil["read"]
                row["frac_copy"] = row["tbps"] / ceil["copy"]
                if "flashinfer_us" in row:
                    row["vs_flashinfer"] = row["flashinfer_us"] / row["radixkv_us"]
                if "flashinfer_write_us" in row:
                    row["vs_flashinfer_write"] = row["flashinfer_write_us"] / row["radixkv_write_us"]
                if sweep and spread is None and (batch, length) in (
                        (1, 32768), (16, 4096), (1, 4096), (64, 512), (1, 512), (16, 512),
                        (64, 4096), (256, 512)) and page == 1:
                    splits = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= max(1, length // 64)]
                    row["split_sweep_us"] = {s: timer(radixkv_runner(k, v, c, s), reps) for s in splits}
                rows.append(row)
                print(fmt_row(row), flush=True)
                del c
    result = {
        "bench": "paged_decode",
        "version": os.environ.get("RADIXKV_VERSION", ""),
        "device": torch.cuda.get_device_name(),
        "sms": sms,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shape": {"heads_q": H_Q, "heads_kv": H_KV, "head_dim": D, "dtype": "bf16"},
        "flush": "clean (1 GiB write, then a 256 MB read); *_write_us: 1 GiB write only",
        "ceilings_tbps": ceil,
        "rows": rows,
    }
    del pool, same
    torch.cuda.empty_cache()
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "paged_decode.json").write_text(json.dumps(result, indent=1))
        plot(result, out_dir / "paged_decode.png")
    return result


def fmt_row(r: dict[str, Any]) -> str:
    fi = f"{r['flashinfer_us']:8.1f} us x{r['vs_flashinfer']:.2f}" if "vs_flashinfer" in r else "-"
    same = f" | same-size read {r['read_same_us']:.1f} us" if "read_same_us" in r else ""
    shape = f"ragged {r['ragged']:>9}" if "ragged" in r else f"L={r['kv_len']:>5}"
    return (f"ps={r['page_size']:>2} B={r['batch']:>3} {shape} work={r['num_splits']:>9} | "
            f"{r['radixkv_us']:8.1f} us {r['tbps']:.2f} TB/s ({r['frac_read']:.2f} read, "
            f"{r['frac_copy']:.2f} copy){same} | FI {fi}"
            + (f" | write flush {r['radixkv_write_us']:.1f} us" if "radixkv_write_us" in r else "")
            + (f" FI {r['flashinfer_write_us']:.1f} us x{r['vs_flashinfer_write']:.2f}"
               if "vs_flashinfer_write" in r else "")
            + (f" | sweep {_r(r['split_sweep_us'])}" if "split_sweep_us" in r else ""))


def _r(d: dict[Any, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:.1f}" for k, v in d.items()) + "}"


def summary(result: dict[str, Any]) -> list[str]:
    lines = []
    flush = "clean" if str(result.get("flush", "write")).startswith("clean") else "write"
    for page in sorted({r["page_size"] for r in result["rows"]}):
        rg = [r for r in result["rows"] if r["page_size"] == page and "ragged" in r
              and "vs_flashinfer" in r]
        if rg:
            big = [r for r in rg if r["kv_bytes"] >= 1e9]
            lines.append(
                f"page {page} ragged: min x{min(r['vs_flashinfer'] for r in rg):.2f} vs FlashInfer "
                f"over {len(rg)} cells (target 1.0: "
                + ", ".join(f"B={r['batch']} {r['ragged']} x{r['vs_flashinfer']:.2f}" for r in rg)
                + ")" + (f"; >=1 GB: min {min(r['frac_read'] for r in big):.2f} of read stream "
                         "(target 0.85)" if big else ""))
        rs = [r for r in result["rows"] if r["page_size"] == page and "vs_flashinfer" in r
              and "ragged" not in r]
        if not rs:
            continue
        gm = math.exp(sum(math.log(r["vs_flashinfer"]) for r in rs) / len(rs))
        big = [r for r in rs if r["kv_bytes"] >= 1e9]
        worst_big = min((r["vs_flashinfer"] for r in big), default=float("nan"))
        worst_read = min((r["frac_read"] for r in big), default=float("nan"))
        one = [r for r in rs if r["batch"] == 1 and r["kv_len"] == 32768]
        lines.append(
            f"page {page} ({flush} flush): geomean x{gm:.2f} vs FlashInfer over {len(rs)} cells "
            f"(target 1.2); >=1 GB cells: min x{worst_big:.2f} (target 1.0), min {worst_read:.3f} "
            f"of read stream (target 0.95); B=1 L=32768: "
            + (f"x{one[0]['vs_flashinfer']:.2f} (target 1.5)" if one else "-")
            + (f"; a contiguous read of the same bytes takes {one[0]['read_same_us']:.1f} us "
               f"= x{one[0]['flashinfer_us'] / one[0]['read_same_us']:.2f} FlashInfer's time"
               if one and "read_same_us" in one[0] else ""))
        ws = [r for r in rs if "vs_flashinfer_write" in r]
        if ws:
            gmw = math.exp(sum(math.log(r["vs_flashinfer_write"]) for r in ws) / len(ws))
            onew = [r for r in ws if r["batch"] == 1 and r["kv_len"] == 32768]
            lines.append(
                f"page {page} (write flush): geomean x{gmw:.2f} over {len(ws)} cells; B=1 L=32768: "
                + (f"{onew[0]['radixkv_write_us']:.1f} vs {onew[0]['flashinfer_write_us']:.1f} µs "
                   f"x{onew[0]['vs_flashinfer_write']:.2f}" if onew else "-"))
    return lines


def print_table(result: dict[str, Any]) -> None:
    c = result["ceilings_tbps"]
    print(f"\npaged_decode, {result['device']} ({result['sms']} SMs), 32/8 heads, D=128, bf16; "
          f"read stream {c['read']:.2f} TB/s, copy {c['copy']:.2f} TB/s; ratio = FlashInfer / radixkv")
    print(f"flush: {result.get('flush', 'write (1 GiB)')}")
    print("| ps | B | L | KV MB | work | radixkv µs | TB/s | of read | of copy | same-size read µs |"
          " FI µs | vs FI | write: radixkv µs | FI µs | vs FI |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def f1(r: dict[str, Any], k: str, fmt: str = "{:.1f}") -> str:
        return fmt.format(r[k]) if k in r else "-"

    for r in result["rows"]:
        shape = f"{r['ragged']} (mean {r['kv_len']})" if "ragged" in r else str(r["kv_len"])
        print(f"| {r['page_size']} | {r['batch']} | {shape} | {r['kv_bytes'] / 1e6:.0f} | "
              f"{r['num_splits']} | {r['radixkv_us']:.1f} | {r['tbps']:.2f} | {r['frac_read']:.2f} | "
              f"{r['frac_copy']:.2f} | {f1(r, 'read_same_us')} | {f1(r, 'flashinfer_us')} | "
              f"{f1(r, 'vs_flashinfer', '{:.2f}')} | "
              f"{f1(r, 'radixkv_write_us')} | {f1(r, 'flashinfer_write_us')} | "
              f"{f1(r, 'vs_flashinfer_write', '{:.2f}')} |")
    for line in summary(result):
        print(line)


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        print("[decode bench] matplotlib missing: no PNG (re-plot with --plot)", file=sys.stderr)
        return
    rows = result["rows"]
    labels = [f"ps{r['page_size']}\nB{r['batch']}\n" + (f"R{r['ragged']}" if "ragged" in r
                                                          else f"L{r['kv_len']}") for r in rows]
    x = list(range(len(rows)))
    read = result["ceilings_tbps"]["read"]
    fig, ax = plt.subplots(figsize=(max(9, len(rows) * 0.6), 4.8))
    ax.bar([i - 0.2 for i in x], [r["frac_read"] for r in rows], 0.4, label="radixkv")
    if all("flashinfer_us" in r for r in rows):
        ax.bar([i + 0.2 for i in x],
               [r["kv_bytes"] / (r["flashinfer_us"] * 1e-6) / 1e12 / read for r in rows], 0.4,
               label="FlashInfer decode")
    ax.axhline(0.95, color="k", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel(f"fraction of read stream ({read:.2f} TB/s)")
    ax.set_title(f"paged decode, 32/8 heads, D=128, bf16 ({result['device']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    global torch
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for JSON + PNG")
    ap.add_argument("--plot", type=Path, default=None, help="re-plot / re-print a JSON and exit")
    ap.add_argument("--page-sizes", default="1,16")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-write-column", action="store_true",
                    help="time the write-flush column only for B=1, L=32768")
    ap.add_argument("--no-extend", action="store_true")
    ap.add_argument("--ragged", action="store_true",
                    help="also time the ragged cells (RAGGED: log-uniform lengths)")
    ap.add_argument("--ragged-only", action="store_true", help="time only the ragged cells")
    ap.add_argument("--fp8", action="store_true",
                    help="also run the FP8 KV section (bench/kernels_fp8.py) at the end")
    ap.add_argument("--fp8-only", action="store_true",
                    help="run only the FP8 KV section (decode cells and extend FP8 vs bf16)")
    args = ap.parse_args()
    if args.plot is not None:
        res = json.loads(args.plot.read_text())
        plot(res, args.plot.with_suffix(".png"))
        print_table(res)
        return
    import torch as _torch  # noqa: PLC0415

    torch = _torch
    if args.fp8_only:
        import kernels_fp8  # noqa: PLC0415

        kernels_fp8.run_fp8_bench(args.out, tuple(int(s) for s in args.page_sizes.split(",")),
                                  extend=not args.no_extend)
        return
    res = run_decode_bench(args.out, page_sizes=tuple(int(s) for s in args.page_sizes.split(",")),
                           sweep=not args.no_sweep, write_column=not args.no_write_column,
                           uniform=not args.ragged_only, ragged=args.ragged or args.ragged_only)
    ext = None
    if not args.no_extend:
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import kernels_extend  # noqa: PLC0415

            # Also against SGLang's Triton kernel (bench/setup_sglang_extend.sh) and a float32
            # reference on every cell.
            ext = kernels_extend.run_extend_bench(
                args.out, check=True,
                sglang_src=os.environ.get("RADIXKV_SGLANG_SRC", ".anchors/sglang_triton"))
        except Exception as exc:  # noqa: BLE001
            print(f"[bench] extend section failed: {exc!r}", file=sys.stderr)
    if ext is not None:
        kernels_extend.print_table(ext)
    print_table(res)
    if args.fp8:
        import kernels_fp8  # noqa: PLC0415

        kernels_fp8.run_fp8_bench(args.out, tuple(int(s) for s in args.page_sizes.split(",")),
                                  extend=not args.no_extend)


if __name__ == "__main__":
    main()
