"""Benchmark of radixkv's extend (prefix-prefill) attention against FlashInfer's paged prefill.

Workload (issue 5): 8 requests, each with P in {0, 1024, 4096} cached tokens and E in {128, 512,
2048} new tokens; Llama-3-8B attention (32 query heads, 8 KV heads, head_dim 128), bf16; page
sizes 1 and 16. K/V live in one pool filled with random data, pages scattered at random. radixkv
gets the host-side bounds an engine's metadata holds (max_q_len, max_kv_len), FlashInfer its plan
over the same lengths.

Reported per cell: median time; TFLOP/s of the unmasked work (per request
4·E·(P + (E+1)/2)·head_dim·query_heads); that rate as a fraction of a bf16 matmul measured in the
same run; and speed ratios against FlashInfer's BatchPrefillWithPagedKVCacheWrapper with the
``fa2`` and ``fa3`` backends, and against SGLang's Triton ``extend_attention_fwd`` (ratio = their
time / ours: > 1 means radixkv is faster). Timing: CUDA events around each call, L2 flushed before
every call (the "clean" flush of bench/_gpu_timing.py: a 1 GiB write, then a 256 MB read, so no
dirty lines are written back inside the timed call; session 1 and the runs before session 2's
final validation used the write alone), median of many. The compared kernels are timed in turns
(each rep calls every one of them once, starting with a different one: ``Timer.interleaved``), so
all meet the same clock drift; until session 21 radixkv's reps all ran first, which favoured it
by 3-6% on the longest cells. ``--check`` also compares each cell with a float32 reference.

``--ragged``: instead, batches whose requests differ (RAGGED: chunked prefill, multi-turn, fresh,
short and tiny prompts) against fa2 / fa3, each timed with and without the extend plan the engine
passes (``no_plan_us``, ``plan_speedup``).

Usage (GPU machine; FlashInfer as bench/README.md describes and SGLang's Triton
modules in .anchors/sglang_triton, made by bench/setup_sglang_extend.sh; both optional):
    PYTHONPATH=python python3 bench/kernels_extend.py --out bench/results --check
    PYTHONPATH=python python3 bench/kernels_extend.py --ragged --out bench/results
``bench/kernels.py`` imports :func:`run_extend_bench`.
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_timing import Timer as _GpuTimer  # noqa: E402
from _gpu_timing import load_flashinfer as _load_flashinfer  # noqa: E402

H_Q, H_KV, D = 32, 8, 128
BATCH = 8
PREFIXES = (0, 1024, 4096)
EXTENDS = (128, 512, 2048)
PAGE_SIZES = (1, 16)


def unmasked_flops(prefix: int, extend: int, batch: int = BATCH) -> float:
    return batch * 4.0 * extend * (prefix + (extend + 1) / 2.0) * D * H_Q


class Timer(_GpuTimer):
    """Median time (µs) of direct calls (no CUDA graph: the anchors' runners are timed as they
    are called), each after a clean L2 flush (bench/_gpu_timing.py)."""

    def __call__(self, fn: Callable[[], Any], reps: int = 30, warmup: int = 3) -> float:  # type: ignore[override]
        return super().__call__(fn, reps, use_graph=False, warmup=warmup)

    def interleaved(self, fns: dict[str, Callable[[], Any]], reps: int = 30,  # type: ignore[override]
                    warmup: int = 3) -> dict[str, float]:
        return super().interleaved(fns, reps, use_graph=False, warmup=warmup)


def matmul_tflops(timer: Timer, n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    us = timer(lambda: torch.matmul(a, b), reps=10)
    return 2.0 * n**3 / (us * 1e-6) / 1e12


class Pool:
    """One paged KV pool per page size, big enough for the largest cell (``BATCH`` requests of
    ``max_tokens_per_req``, or ``num_pages`` pages when given), random contents."""

    def __init__(self, page_size: int, max_tokens_per_req: int, seed: int = 0,
                 num_pages: Optional[int] = None):
        self.page_size = page_size
        per_req = math.ceil(max_tokens_per_req / page_size)
        self.num_pages = num_pages if num_pages is not None else int(BATCH * per_req * 1.25) + 1
        g = torch.Generator(device="cuda").manual_seed(seed)
        shape = (self.num_pages, page_size, H_KV, D)
        self.k = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
        self.v = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)

    def cell(self, prefix: int, extend: int, seed: int, runs: int = 1) -> dict[str, torch.Tensor]:
        """One uniform cell's inputs: ``BATCH`` requests of (prefix, extend). ``runs`` > 1
        (diagnostics): the pages come in runs of ``runs`` consecutive indices starting at random
        multiples of ``runs``, so page size 1 with runs 16 touches exactly the memory pattern of
        page size 16 through page 1's per-row table."""
        return self.batch([(prefix, extend)] * BATCH, seed, runs)

    def batch(self, specs: list[tuple[int, int]], seed: int, runs: int = 1) -> dict[str, torch.Tensor]:
        """A batch of requests with their own (prefix, extend); pages scattered at random (in runs
        of ``runs``, see ``cell``)."""
        g = torch.Generator().manual_seed(seed)
        lens = [p + e for p, e in specs]
        n_pages = [math.ceil(n / self.page_size) for n in lens]
        if runs > 1:
            starts = torch.randperm(self.num_pages // runs, generator=g) * runs
            perm = (starts[:, None] + torch.arange(runs)[None, :]).reshape(-1)[: sum(n_pages)]
        else:
            perm = torch.randperm(self.num_pages, generator=g)[: sum(n_pages)]
        i32 = dict(dtype=torch.int32, device="cuda")
        ext = torch.tensor([e for _, e in specs])
        return {
            "q": torch.randn(int(ext.sum()), H_Q, D, generator=g).to("cuda", torch.bfloat16),
            "qo_indptr": torch.cat([torch.zeros(1, dtype=torch.int64), ext.cumsum(0)]).to(**i32),
            "kv_indptr": torch.tensor([0] + list(torch.tensor(n_pages).cumsum(0)), **i32),
            "kv_indices": perm.to(**i32),
            "kv_lens": torch.tensor(lens, **i32),
            "kv_last_page_len": torch.tensor([(n - 1) % self.page_size + 1 for n in lens], **i32),
        }


# Ragged batches: (name, groups), a group being (requests, prefix range, extend range); each
# length is drawn log-uniform from its range with the batch's seed (a range (0, 0): no prefix). "chunked" is chunked prefill:
# long prompts continuing in 512-token chunks beside fresh prompts; "short" stays within 512 keys,
# "tiny" within 256 (the short-context kernel's range takes requests of up to 128 keys).
RAGGED = (
    ("chunked", ((4, (2048, 16384), (512, 512)), (4, (0, 0), (64, 1024)))),
    ("multi-turn", ((16, (256, 8192), (16, 512)),)),
    ("fresh", ((32, (0, 0), (16, 2048)),)),
    ("short", ((64, (0, 0), (16, 512)),)),
    ("tiny", ((64, (0, 0), (16, 256)),)),
)


def ragged_specs(groups: tuple[Any, ...], seed: int) -> list[tuple[int, int]]:
    import random  # noqa: PLC0415

    rng = random.Random(seed)

    def draw(lo: int, hi: int) -> int:
        return 0 if hi == 0 else int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    return [(draw(*pr), draw(*er)) for n, pr, er in groups for _ in range(n)]


def run_ragged_extend(page_sizes=PAGE_SIZES, reps: int = 30, seed: int = 5) -> list[dict[str, Any]]:
    """radixkv against FlashInfer fa2 / fa3 on the RAGGED batches (printed, returned)."""
    from radixkv.ops import loader  # noqa: PLC0415

    loader.load()
    timer = Timer()
    fi = load_flashinfer()
    workspace = torch.empty(512 << 20, dtype=torch.uint8, device="cuda") if fi else None
    rows: list[dict[str, Any]] = []
    for ps in page_sizes:
        for i, (name, groups) in enumerate(RAGGED):
            specs = ragged_specs(groups, seed + i)
            pages = sum(math.ceil((p + e) / ps) for p, e in specs)
            pool = Pool(ps, 0, seed=i, num_pages=int(pages * 1.25) + 1)
            c = pool.batch(specs, seed + i)
            flops = sum(4.0 * e * (p + (e + 1) / 2.0) * D * H_Q for p, e in specs)
            max_q, max_kv = max(e for _, e in specs), max(p + e for p, e in specs)
            ours = radixkv_runner(pool, c, max_q, max_kv, specs)
            row: dict[str, Any] = {"page_size": ps, "batch": name, "requests": len(specs),
                                   "new_tokens": sum(e for _, e in specs),
                                   "cached_tokens": sum(p for p, _ in specs), "max_kv": max_kv}
            # The same op without the extend plan (the kernels' own tile order) beside it.
            runs = {"radixkv": ours, "no_plan": radixkv_runner(pool, c, max_q, max_kv, specs, plan=False)}
            if fi is not None:
                runs.update(flashinfer_runners(fi, pool, c, workspace, ours, row))
            row.update({f"{n}_us": t for n, t in timer.interleaved(runs, reps=reps).items()})
            row["tflops"] = flops / (row["radixkv_us"] * 1e-6) / 1e12
            row["plan_speedup"] = row["no_plan_us"] / row["radixkv_us"]
            for backend in ("fa2", "fa3"):
                if f"{backend}_us" in row:
                    row[f"vs_{backend}"] = row[f"{backend}_us"] / row["radixkv_us"]
            rows.append(row)
            print(f"[ragged extend] ps={ps:>2} {name:<10} B={len(specs):>2} new={row['new_tokens']:>6} "
                  f"cached={row['cached_tokens']:>6} max_kv={max_kv:>5} | radixkv {row['radixkv_us']:8.1f} us "
                  f"{row['tflops']:5.0f} TF/s, x{row['plan_speedup']:.2f} of no plan | "
                  f"fa2 x{row.get('vs_fa2', float('nan')):.2f} | "
                  f"fa3 x{row.get('vs_fa3', float('nan')):.2f} | err vs fa3 "
                  f"{row.get('rel_err_vs_fa3', float('nan')):.1e}", flush=True)
            del pool, c
            torch.cuda.empty_cache()
    return rows


def flashinfer_runners(fi: Any, pool: Pool, c: dict[str, torch.Tensor], workspace: torch.Tensor,
                       ours: Callable[[], Any], row: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """FlashInfer's fa2 and fa3 backends on ``c``, by name, for timing beside radixkv; records in
    ``row`` radixkv's output error against each (``rel_err_vs_{backend}``), or ``{backend}_error``
    for a backend that fails (and is left out)."""
    mine = ours().float()
    runs: dict[str, Callable[[], Any]] = {}
    for backend in ("fa2", "fa3"):
        try:
            run = flashinfer_runner(fi, backend, pool, c, workspace)
            ref = run().float()
            row[f"rel_err_vs_{backend}"] = float((mine - ref).norm() / ref.norm())
            runs[backend] = run
        except Exception as exc:  # noqa: BLE001
            row[f"{backend}_error"] = repr(exc)[:200]
    return runs


def load_flashinfer() -> Optional[Any]:
    return _load_flashinfer("extend bench")


def flashinfer_runner(fi: Any, backend: str, pool: Pool, c: dict[str, torch.Tensor],
                      workspace: torch.Tensor) -> Callable[[], Any]:
    w = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend)
    w.plan(c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["kv_last_page_len"], H_Q, H_KV, D,
           pool.page_size, causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    out = torch.empty_like(c["q"])
    return lambda: w.run(c["q"], (pool.k, pool.v), out=out)


def load_sglang_extend(src: Optional[str]) -> Optional[Callable[..., Any]]:
    """SGLang's Triton extend kernel (``extend_attention_fwd``, sglang 0.5.23) as an external anchor.

    ``src`` is a folder holding an importable ``sglang`` tree with only SGLang's Triton attention
    modules and stand-ins for the few ``sglang.srt`` names they import (``.anchors/sglang_triton``;
    importing the real package would pull in its whole runtime). Nothing of it is part of radixkv.
    Returns None if it is missing or does not load."""
    if not src:
        return None
    root = Path(src).resolve()
    if not (root / "sglang" / "kernels" / "ops" / "attention" / "extend_attention.py").is_file():
        print(f"[extend bench] SGLang Triton sources not found under {root}; anchor skipped", file=sys.stderr)
        return None
    try:
        sys.path.insert(0, str(root))
        from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd  # noqa: PLC0415

        return extend_attention_fwd  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001
        print(f"[extend bench] SGLang extend kernel did not load ({exc!r}); anchor skipped", file=sys.stderr)
        return None


def sglang_runner(fwd: Callable[..., Any], pool: Pool, c: dict[str, torch.Tensor], prefix: int,
                  extend: int) -> Callable[[], Any]:
    """SGLang's calling convention: the new tokens' K/V as separate contiguous tensors, the cached
    prefix through token-slot indices into the pool viewed as [slots, H_kv, D] (its Triton backend
    indexes tokens, so page size 16 is passed as 16 consecutive slots per page)."""
    ps = pool.page_size
    kf = pool.k.view(-1, H_KV, D)
    vf = pool.v.view(-1, H_KV, D)
    n_pages = math.ceil((prefix + extend) / ps)
    pages = c["kv_indices"].view(BATCH, n_pages).long()
    pos = torch.arange(prefix + extend, device=pages.device)
    slots = pages[:, pos // ps] * ps + pos % ps  # [B, P + E]
    prefix_slots = slots[:, :prefix].reshape(-1).to(torch.int32).contiguous()
    ext = slots[:, prefix:].reshape(-1)
    k_ext, v_ext = kf[ext].contiguous(), vf[ext].contiguous()
    kv_indptr = torch.arange(0, BATCH + 1, dtype=torch.int32, device=pages.device) * prefix
    out = torch.empty_like(c["q"])
    scale = 1.0 / math.sqrt(D)

    def run() -> torch.Tensor:
        fwd(c["q"], k_ext, v_ext, out, kf, vf, c["qo_indptr"], kv_indptr, prefix_slots, None, True,
            None, extend, 1.0, 1.0, sm_scale=scale)
        return out

    return run


def reference_out(pool: Pool, c: dict[str, torch.Tensor], prefix: int, extend: int) -> torch.Tensor:
    """float32 attention of one cell (gathered through the page table; causal with the prefix)."""
    ps = pool.page_size
    n_pages = math.ceil((prefix + extend) / ps)
    pages = c["kv_indices"].view(BATCH, n_pages).long()
    pos = torch.arange(prefix + extend, device=pages.device)
    page, off = pages[:, pos // ps], pos % ps
    k = pool.k[page, off].float()  # [B, L, H_kv, D]
    v = pool.v[page, off].float()
    q = c["q"].float().view(BATCH, extend, H_KV, H_Q // H_KV, D)
    s = torch.einsum("beagd,blad->bagel", q, k) / math.sqrt(D)
    i = torch.arange(extend, device=s.device)[:, None]
    j = torch.arange(prefix + extend, device=s.device)[None, :]
    s = s.masked_fill(j > i + prefix, float("-inf"))
    o = torch.einsum("bagel,blad->beagd", s.softmax(-1), v)
    return o.reshape(BATCH * extend, H_Q, D)


def radixkv_runner(pool: Pool, c: dict[str, torch.Tensor], extend: int,
                   max_kv_len: int = 0, specs: Optional[list[tuple[int, int]]] = None,
                   plan: bool = True) -> Callable[[], Any]:
    """The op called directly, with what an engine's metadata gives it: max_q_len and max_kv_len
    (max_extend_len and max_seq_len) and, for a batch of ``specs`` (prefix, extend) pairs, the
    extend plan (``plan=False``: none). FlashInfer's plan reads the same lengths on the host."""
    from radixkv.ops import _status, extend_plan  # noqa: PLC0415

    out = torch.empty_like(c["q"])
    op = torch.ops.radixkv.extend_attention.default
    scale = 1.0 / math.sqrt(D)
    args: tuple[Any, ...] = (c["q"], pool.k, pool.v, c["qo_indptr"], c["kv_indptr"], c["kv_indices"],
                             c["kv_lens"], out, scale, 0, extend, _status.buffer(c["q"].device), None,
                             None, max_kv_len)
    if specs is not None and plan:
        tiles, rows = extend_plan([e for _, e in specs], [p + e for p, e in specs], H_Q, H_KV, D)
        if tiles.shape[0] > 0:
            args += (tiles, rows)
    return lambda: (op(*args), out)[1]


def run_extend_bench(out_dir: Optional[Path] = None, page_sizes=PAGE_SIZES, prefixes=PREFIXES,
                     extends=EXTENDS, reps: int = 30, version: str = "",
                     cells: Optional[list[tuple[int, ...]]] = None, anchors: bool = True,
                     check: bool = False, sglang_src: Optional[str] = None) -> dict[str, Any]:
    """Build (radixkv.ops.loader), check against FlashInfer, time every
    cell (``cells`` = (page_size, P, E) triples, or (page_size, P, E, runs) with runs as in
    Pool.cell; default the full grid). ``check``: also compare
    each cell's output with a float32 reference (``rel_err_vs_ref``; cells with P + E <= 2560).
    ``sglang_src``: time SGLang's Triton extend kernel too (see load_sglang_extend). Returns the
    JSON."""
    from radixkv.ops import loader

    loader.load()
    timer = Timer()
    mm = matmul_tflops(timer)
    fi = load_flashinfer() if anchors else None
    sg = load_sglang_extend(sglang_src) if anchors else None
    workspace = torch.empty(512 << 20, dtype=torch.uint8, device="cuda") if fi else None
    rows: list[dict[str, Any]] = []
    if cells is None:
        cells = [(ps, p, e) for ps in page_sizes for p in prefixes for e in extends]
    for ps in sorted({c[0] for c in cells}, key=[c[0] for c in cells].index):
        pool = Pool(ps, max(c[1] + c[2] for c in cells if c[0] == ps))
        for cell in [c for c in cells if c[0] == ps]:
            prefix, extend = cell[1], cell[2]
            runs = cell[3] if len(cell) > 3 else 1
            c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps, runs=runs)
            flops = unmasked_flops(prefix, extend)
            ours = radixkv_runner(pool, c, extend, prefix + extend, [(prefix, extend)] * BATCH)
            row: dict[str, Any] = {"page_size": ps, "prefix": prefix, "extend": extend,
                                   "flops": flops}
            if runs > 1:
                row["page_runs"] = runs
            sides: dict[str, Callable[[], Any]] = {"radixkv": ours}
            if fi is not None:
                sides.update(flashinfer_runners(fi, pool, c, workspace, ours, row))
                errs = [row[k] for k in ("rel_err_vs_fa2", "rel_err_vs_fa3") if k in row]
                if errs:
                    row["rel_err_vs_flashinfer"] = errs[0]
            if sg is not None:
                try:
                    run = sglang_runner(sg, pool, c, prefix, extend)
                    sref = run().float()
                    row["rel_err_sglang_vs_radixkv"] = float((ours().float() - sref).norm() / sref.norm())
                    sides["sglang"] = run
                except Exception as exc:  # noqa: BLE001
                    row["sglang_error"] = repr(exc)[:200]
            row.update({f"{n}_us": t for n, t in timer.interleaved(sides, reps=reps).items()})
            row["tflops"] = flops / (row["radixkv_us"] * 1e-6) / 1e12
            row["frac_matmul"] = row["tflops"] / mm
            for other in ("fa2", "fa3", "sglang"):
                if f"{other}_us" in row:
                    row[f"vs_{other}"] = row[f"{other}_us"] / row["radixkv_us"]
            if check and prefix + extend <= 2560:
                ref = reference_out(pool, c, prefix, extend)
                row["rel_err_vs_ref"] = float((ours().float() - ref).norm() / ref.norm())
                del ref
            rows.append(row)
            print(_fmt_row(row), flush=True)
        del pool
        torch.cuda.empty_cache()
    result = {
        "bench": "extend_attention",
        "version": version or os.environ.get("RADIXKV_VERSION", ""),
        "device": torch.cuda.get_device_name(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shape": {"batch": BATCH, "heads_q": H_Q, "heads_kv": H_KV, "head_dim": D, "dtype": "bf16"},
        "matmul_tflops": mm,
        "rows": rows,
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "extend_attention.json").write_text(json.dumps(result, indent=1))
        _plot(result, out_dir / "extend_attention.png")
    return result


def _fmt_row(r: dict[str, Any]) -> str:
    def f(key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "-"

    runs = f"r{r['page_runs']}" if "page_runs" in r else ""
    return (f"ps={r['page_size']:>2}{runs} P={r['prefix']:>4} E={r['extend']:>4} | radixkv "
            f"{r['radixkv_us']:9.1f} us {r['tflops']:6.1f} TF/s ({r['frac_matmul']:.2f} mm) | "
            f"fa2 {f('fa2_us', '9.1f')} us x{f('vs_fa2', '.2f')} | fa3 {f('fa3_us', '9.1f')} us "
            f"x{f('vs_fa3', '.2f')} | sglang {f('sglang_us', '9.1f')} us x{f('vs_sglang', '.2f')} | "
            f"err {f('rel_err_vs_flashinfer', '.1e')} ref {f('rel_err_vs_ref', '.1e')}"
            + (f" | {r['sglang_error'][:80]}" if "sglang_error" in r else ""))


def print_table(result: dict[str, Any]) -> None:
    print(f"\nextend_attention, {result['device']}, bf16 matmul {result['matmul_tflops']:.0f} TF/s "
          f"(ratio = FlashInfer time / radixkv time)")
    print("| ps | P | E | radixkv µs | TF/s | of matmul | fa2 µs | vs fa2 | fa3 µs | vs fa3 | "
          "SGLang Triton µs | vs SGLang |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        def g(k: str, fmt: str) -> str:
            return format(r[k], fmt) if k in r else "-"

        print(f"| {r['page_size']}{'r' + str(r['page_runs']) if 'page_runs' in r else ''} | {r['prefix']} | {r['extend']} | {r['radixkv_us']:.1f} | "
              f"{r['tflops']:.0f} | {r['frac_matmul']:.2f} | {g('fa2_us', '.1f')} | "
              f"{g('vs_fa2', '.2f')} | {g('fa3_us', '.1f')} | {g('vs_fa3', '.2f')} | "
              f"{g('sglang_us', '.1f')} | {g('vs_sglang', '.2f')} |")


def _plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        return
    rows = result["rows"]
    labels = [f"ps{r['page_size']}\nP{r['prefix']}\nE{r['extend']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.7), 4.5))
    ax.bar([i - 0.2 for i in x], [r["frac_matmul"] for r in rows], 0.4, label="radixkv")
    for key, off, name in (("fa2_us", 0.2, "FlashInfer fa2"),):
        if all(key in r for r in rows):
            ax.bar([i + off for i in x],
                   [r["flops"] / (r[key] * 1e-6) / 1e12 / result["matmul_tflops"] for r in rows],
                   0.4, label=name)
    if all("fa3_us" in r for r in rows):
        ax.plot(list(x), [r["flops"] / (r["fa3_us"] * 1e-6) / 1e12 / result["matmul_tflops"]
                          for r in rows], "k_", markersize=14, label="FlashInfer fa3")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("fraction of bf16 matmul rate")
    ax.set_title(f"extend attention, 8 requests, 32/8 heads, D=128, bf16 ({result['device']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for JSON + PNG")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--page-sizes", default="1,16")
    ap.add_argument("--cells", default=None,
                    help="ps:P:E[:runs],... (default: the full grid; runs: see Pool.cell)")
    ap.add_argument("--no-anchors", action="store_true", help="skip FlashInfer")
    ap.add_argument("--ragged", action="store_true",
                    help="only the ragged batches (RAGGED) against FlashInfer fa2 / fa3")
    ap.add_argument("--check", action="store_true", help="compare with a float32 reference")
    ap.add_argument("--sglang-src", default=os.environ.get("RADIXKV_SGLANG_SRC", ".anchors/sglang_triton"),
                    help="folder with an importable sglang Triton-kernel tree (anchor; optional)")
    args = ap.parse_args()
    if args.ragged:
        rows = run_ragged_extend(tuple(int(s) for s in args.page_sizes.split(",")), args.reps)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "extend_ragged.json").write_text(json.dumps(
                {"bench": "extend_ragged", "device": torch.cuda.get_device_name(),
                 "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows},
                indent=1))
        return
    cells = None
    if args.cells:
        cells = [tuple(int(x) for x in c.split(":")) for c in args.cells.split(",")]
    res = run_extend_bench(args.out, page_sizes=tuple(int(s) for s in args.page_sizes.split(",")),
                           reps=args.reps, cells=cells, anchors=not args.no_anchors,
                           check=args.check, sglang_src=args.sglang_src)
    print_table(res)


if __name__ == "__main__":
    main()
