"""End-to-end serving benchmark (issue 11): traces (a)-(d) of ``serve_traces.py`` through the engine.

GPU (the numbers that count; Llama-3-8B shape, bf16, random weights)::

    python bench/serve.py --device cuda --json bench/results/serve.json --png bench/results/serve.png

CPU smoke test (tiny model, reference ops, lengths scaled down)::

    python bench/serve.py --model-shape tiny --device cpu --requests 16

Per trace and engine configuration it reports wall time, output and total tokens/s, TTFT and TPOT
p50/p99, prefix hit rate, peak KV in use, preemptions, host (CPU) time per step outside the
forward, and the fraction of a roofline measured in the same process: prefill FLOPs over a timed
bf16 matmul, plus every decode step's weight and KV bytes over a timed read stream. Side by side on
the same weights and trace: radix reuse on vs off (trace a); on trace (b), at one KV budget
(``--budget-seqs`` prompt + max_new_tokens reservations) that limits the contiguous batch, paged
allocation vs a server that reserves each request's maximum length contiguously (the model's
context, ``--max-len``; the PagedAttention comparison and the headline ratio), and vs an "oracle"
contiguous server that knows each request's exact final length. With ``--hf-baseline`` the
transformers numbers kept in ``bench/results/hf_baseline.json`` (written by
``bench/hf_baseline.py``) give a "vs transformers" ratio per trace, with the request count each side
ran.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import serve_traces  # noqa: E402
from serve_traces import TRACES, Trace, TraceRequest, make_trace  # noqa: E402

from radixkv.engine.agreement import compare  # noqa: E402
from radixkv.engine.engine import Engine, EngineConfig  # noqa: E402
from radixkv.engine.kv import KV_DTYPES, kv_cache_dtype, kv_dtype_name  # noqa: E402
from radixkv.engine.model import ModelConfig  # noqa: E402
from radixkv.engine.request import Completion, Request, SamplingParams  # noqa: E402
from radixkv.engine.scheduler import SchedulerConfig  # noqa: E402

GiB = 1 << 30


# ----------------------------------------------------------------------------- the model


def _fallback_shape(name: str) -> ModelConfig:
    if name == "tiny":
        return ModelConfig()
    if name == "llama3-8b":
        return ModelConfig(vocab_size=128256, hidden_size=4096, num_layers=32, num_q_heads=32,
                           num_kv_heads=8, head_dim=128, intermediate_size=14336, max_seq_len=8192,
                           rope_theta=500000.0)
    raise SystemExit(f"serve.py: shape {name!r} needs radixkv.engine.checkpoint (not present)")


def build_model(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """``checkpoint.model_from_shape`` when it exists; otherwise a TinyLlama of that shape whose
    random weights are drawn on the device (a stand-in until the checkpoint module lands)."""
    try:
        from radixkv.engine.checkpoint import model_from_shape  # type: ignore[attr-defined]
    except ImportError:
        model_from_shape = None
    if model_from_shape is not None:
        return model_from_shape(name, device, dtype, seed)
    from radixkv.engine import model as M

    c = _fallback_shape(name)
    if name == "tiny":
        return M.TinyLlama(c, device, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)

    def w(rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
        t = torch.randn(rows, cols, generator=gen, device=device, dtype=dtype)
        return t.mul_(scale / math.sqrt(rows))

    def norm(n: int) -> torch.Tensor:
        return (1.0 + 0.1 * torch.randn(n, generator=gen, device=device)).to(dtype)

    m = object.__new__(M.TinyLlama)
    m.config, m.device, m.dtype = c, device, dtype
    qd, kd = c.num_q_heads * c.head_dim, c.num_kv_heads * c.head_dim
    m.embed = torch.randn(c.vocab_size, c.hidden_size, generator=gen, device=device, dtype=dtype)
    m.layers = [M._Layer(norm(c.hidden_size), w(c.hidden_size, qd), w(c.hidden_size, kd),
                         w(c.hidden_size, kd), w(qd, c.hidden_size, 0.5), norm(c.hidden_size),
                         w(c.hidden_size, c.intermediate_size), w(c.hidden_size, c.intermediate_size),
                         w(c.intermediate_size, c.hidden_size, 0.5)) for _ in range(c.num_layers)]
    m.final_norm = norm(c.hidden_size)
    m.lm_head = w(c.hidden_size, c.vocab_size, 4.0)
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
    ang = torch.outer(torch.arange(c.max_seq_len).double(), inv)
    m._cos, m._sin = ang.cos().to(device, torch.float32), ang.sin().to(device, torch.float32)
    return m


def layer_params(c: ModelConfig) -> int:
    """Weights every token multiplies through (attention projections and MLP of all layers)."""
    qd, kd = c.num_q_heads * c.head_dim, c.num_kv_heads * c.head_dim
    per = c.hidden_size * (qd + 2 * kd) + qd * c.hidden_size + 3 * c.hidden_size * c.intermediate_size
    return c.num_layers * per


# ----------------------------------------------------------------------------- ceilings


def measure_ceilings(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """bf16 matmul FLOP/s and read-stream bytes/s, timed here (same process as the runs)."""
    if device.type != "cuda":
        a = torch.randn(512, 512, dtype=torch.float32)
        t = time.perf_counter()
        for _ in range(10):
            a @ a
        mm = 10 * 2 * 512**3 / (time.perf_counter() - t)
        x = torch.ones(1 << 24, dtype=torch.float32)
        t = time.perf_counter()
        for _ in range(5):
            x.sum()
        return {"matmul_flops": mm, "read_bytes": 5 * x.numel() * 4 / (time.perf_counter() - t)}
    n = 8192
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)

    def timed(fn: Any, reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3 / reps

    mm = 2 * n**3 / timed(lambda: a @ b, 20)
    del a, b
    x = torch.ones(4 * GiB // 2, dtype=torch.bfloat16, device=device)
    rd = x.numel() * 2 / timed(lambda: torch.sum(x, dtype=torch.float32), 10)
    del x
    torch.cuda.empty_cache()
    return {"matmul_flops": mm, "read_bytes": rd}


def roofline_s(engine: Engine, ceil: dict[str, float]) -> dict[str, float]:
    """Prefill FLOPs / matmul rate + decode weight and KV bytes / read rate, over the run's steps."""
    c = engine.model.config
    elem = torch.empty((), dtype=engine.model.dtype).element_size()
    lp = layer_params(c)
    head = c.hidden_size * c.vocab_size
    bpt = engine.pool.bytes_per_token  # the pool's element type: FP8 pools read half the bytes
    flops = 0.0
    dbytes = 0.0
    for t in engine.stats.timings:
        attn = 4.0 * t.attn_units * c.head_dim * c.num_q_heads * c.num_layers
        flops += 2.0 * lp * t.prefill_tokens + attn + 2.0 * head * t.sampled_rows * (t.prefill_tokens > 0)
        if t.kind == "decode":
            dbytes += (lp + head) * elem + t.kv_read * bpt
        else:
            dbytes += t.kv_read * bpt
    pre = flops / ceil["matmul_flops"]
    dec = dbytes / ceil["read_bytes"]
    return {"prefill_s": pre, "decode_s": dec, "total_s": pre + dec,
            "prefill_flops": flops, "decode_bytes": dbytes}


# ----------------------------------------------------------------------------- one run


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else 0.0


def run_trace(model: Any, trace_name: str, args: argparse.Namespace, label: str, *,
              pool_tokens: int, page_size: int = 16, radix: bool = True,
              admission: str = "paged", contiguous_len: Optional[int] = None,
              ceil: dict[str, float], tp: Any = None, kv_dtype: Optional[str] = None,
              outputs: Optional[list[Completion]] = None) -> dict[str, Any]:
    """One engine run of a trace; ``kv_dtype`` defaults to ``--kv-dtype``, and ``outputs`` (if
    given) receives the completions (for token agreement between runs)."""
    kv_dtype = kv_dtype or args.kv_dtype
    trace = make_trace(trace_name, args.requests, model.config.vocab_size, args.seed, args.scale)
    sched = SchedulerConfig(max_batch_tokens=args.max_batch_tokens, chunk_size=args.chunk_size,
                            max_running=args.max_running, admission=admission,  # type: ignore[arg-type]
                            contiguous_len=contiguous_len, decode_reserve=args.decode_reserve)
    cfg = EngineConfig(pool_tokens=pool_tokens, page_size=page_size, radix=radix, kv_dtype=kv_dtype,
                       cuda_graphs=(None if args.graphs else False), graph_max_batch=args.max_running,
                       profile=args.profile, memory_samples=False, scheduler=sched)
    engine = tp.engine(cfg) if tp is not None else Engine(model, cfg)
    if tp is not None:
        tp.all_reduce_time()  # starts (or resets) rank 0's all-reduce timer
    if engine.graphs is not None:
        t = time.perf_counter()
        engine.graphs.capture_all()
        capture_s = time.perf_counter() - t
    else:
        capture_s = 0.0
    by_rid: dict[str, TraceRequest] = {}

    def to_request(tr: TraceRequest) -> Request:
        by_rid[tr.rid] = tr
        temp = args.temperature if tr.n > 1 else 0.0
        return Request(tr.rid, np.asarray(tr.prompt, np.int32),
                       SamplingParams(max_new_tokens=tr.max_new_tokens, n=tr.n, temperature=temp,
                                      seed=args.seed))

    def follow(comp: Completion) -> list[Request]:
        nxt = trace.follow_up(by_rid[comp.request.rid], comp.outputs[0])
        return [to_request(nxt)] if nxt is not None else []

    if model.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    done = engine.run([to_request(r) for r in trace.initial()], follow)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if outputs is not None:
        outputs.extend(done)
    ar_s, ar_calls = tp.all_reduce_time() if tp is not None else (0.0, 0)
    s = engine.stats
    out_tokens = sum(len(o) for c in done for o in c.outputs)
    prompt_tokens = sum(int(c.request.prompt.size) for c in done)
    ttft = [c.ttft_s for c in done]
    tpot = [c.tpot_s for c in done if c.tpot_s > 0]
    dec = [t for t in s.timings if t.kind == "decode"]
    big = max((t.batch for t in dec), default=0)
    dec_big = [t for t in dec if t.batch >= 0.9 * big] if big else []
    host = [t.host_outside_forward for t in s.timings]
    roof = roofline_s(engine, ceil)
    busy = max(1, s.steps - s.idle_steps)
    res = {
        "label": label, "trace": trace_name, "tp": tp.world if tp is not None else 1,
        "allreduce_ms_per_step": 1e3 * ar_s / busy, "allreduce_calls": ar_calls, "page_size": page_size, "radix": radix,
        "admission": admission, "contiguous_len": contiguous_len, "pool_tokens": pool_tokens,
        "kv_dtype": kv_dtype_name(engine.kv_dtype), "pool_gib": engine.pool.nbytes / GiB,
        "reserve_ratio_end": engine.scheduler.reserve,
        "requests": len(done), "sequences": sum(len(c.outputs) for c in done),
        "prompt_tokens": prompt_tokens, "output_tokens": out_tokens,
        "wall_s": wall, "graph_capture_s": capture_s,
        "output_tokens_per_s": out_tokens / wall, "total_tokens_per_s": (prompt_tokens + out_tokens) / wall,
        "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99),
        "tpot_p50_s": _pct(tpot, 50), "tpot_p99_s": _pct(tpot, 99),
        "prefix_hit_rate": s.cached_tokens / max(1, s.prompt_tokens),
        "prefill_computed": s.prefill_computed, "recomputed_tokens": s.recomputed_tokens,
        "peak_kv_in_use_tokens": s.peak_in_use_tokens,
        "peak_kv_in_use_gib": s.peak_in_use_tokens * engine.pool.bytes_per_token / GiB,
        "preemptions": engine.scheduler.preemptions,
        "steps": s.steps - s.idle_steps, "graph_steps": s.graph_steps,
        "h2d_copies_per_step": s.h2d_copies / max(1, s.steps - s.idle_steps),
        "graphs_disabled": engine.graphs.disabled if engine.graphs is not None else "off",
        "max_decode_batch": big,
        "host_ms_per_step_mean": 1e3 * statistics.fmean(host) if host else 0.0,
        "decode_step_ms_at_max_batch": 1e3 * statistics.median(t.total for t in dec_big) if dec_big else 0.0,
        "decode_host_ms_at_max_batch": 1e3 * statistics.median(t.host_outside_forward for t in dec_big) if dec_big else 0.0,
        "decode_host_fraction_at_max_batch": (
            sum(t.host_outside_forward for t in dec_big) / sum(t.total for t in dec_big) if dec_big else 0.0),
        "roofline": roof, "roofline_fraction": roof["total_s"] / wall,
        "peak_gpu_mem_gib": (torch.cuda.max_memory_allocated() / GiB if model.device.type == "cuda" else 0.0),
    }
    del engine
    gc.collect()
    if model.device.type == "cuda":
        torch.cuda.empty_cache()
    return res


def fmt(r: dict[str, Any]) -> str:
    return (f"{r['label']:<28} {r['wall_s']:7.2f}s {r['output_tokens_per_s']:9.0f} {r['total_tokens_per_s']:9.0f} "
            f"{1e3 * r['ttft_p50_s']:8.0f}/{1e3 * r['ttft_p99_s']:<8.0f} {1e3 * r['tpot_p50_s']:6.1f}/{1e3 * r['tpot_p99_s']:<6.1f} "
            f"{100 * r['prefix_hit_rate']:5.1f}% {r['peak_kv_in_use_gib']:7.2f} {r['preemptions']:5d} "
            f"{r['host_ms_per_step_mean']:6.2f} {100 * r['decode_host_fraction_at_max_batch']:5.1f}% "
            f"{r['roofline_fraction']:5.2f}")


HEADER = (f"{'run':<28} {'wall':>8} {'out tok/s':>9} {'tot tok/s':>9} {'TTFT ms p50/p99':>17} "
          f"{'TPOT ms':>13} {'hit':>6} {'KV GiB':>7} {'pre':>5} {'host ms':>6} {'dec host':>6} {'roof':>5}")


def plot(results: list[dict[str, Any]], ratios: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    labels = [r["label"] for r in results]
    axes[0].barh(labels, [r["total_tokens_per_s"] for r in results], color="tab:blue")
    axes[0].set_xlabel("total tokens/s (prompt + output)")
    axes[0].invert_yaxis()
    axes[1].barh(labels, [r["roofline_fraction"] for r in results], color="tab:green")
    axes[1].set_xlabel("fraction of the measured roofline")
    axes[1].invert_yaxis()
    axes[1].set_yticklabels([])
    fig.suptitle("radixkv engine: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_hf(path: Path) -> dict[str, dict[str, Any]]:
    """trace name -> transformers' row (``total_tokens_per_s``, ``requests``, ...) from
    hf_baseline.py's JSON; rows without a numeric total tokens/s are skipped."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out: dict[str, dict[str, Any]] = {}
    items = data.get("traces", data.get("results", data))
    if isinstance(items, dict):
        items = [dict(v, trace=k) if isinstance(v, dict) else {} for k, v in items.items()]
    for it in items if isinstance(items, list) else []:
        name, tps = it.get("trace"), it.get("total_tokens_per_s")
        if name in TRACES and isinstance(tps, (int, float)):
            out[name] = it
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model-shape", default=None, help="default: llama3-8b on cuda, tiny on cpu")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default="auto")
    p.add_argument("--requests", type=int, default=256, help="per trace (chat: turns; parallel: sequences)")
    p.add_argument("--scale", type=float, default=None, help="trace length scale (default 1, 1/16 on cpu)")
    p.add_argument("--traces", default=",".join(TRACES))
    p.add_argument("--quick", action="store_true",
                   help="accepted for older command lines; every run is included either way")
    p.add_argument("--pool-tokens", type=int, default=None,
                   help="KV pool in tokens at --kv-dtype (default: from free memory, or --pool-gib)")
    p.add_argument("--kv-dtype", default="auto",
                   help=f"KV pool element type: {', '.join(KV_DTYPES)} (auto: the model's dtype; "
                   "fp8 = fp8_e4m3); a pool sized in bytes (free memory, --pool-gib) holds twice "
                   "the tokens at FP8")
    p.add_argument("--kv-compare", action="store_true",
                   help="with an FP8 --kv-dtype: after each trace's main run, run it again with a "
                   "model-dtype pool of the same bytes; print tok/s, pool tokens and token "
                   "agreement of both")
    p.add_argument("--extra-runs", action=argparse.BooleanOptionalAction, default=True,
                   help="the side-by-side runs (radix off and page 1 on (a); the contiguous "
                   "baselines on (b)); --no-extra-runs keeps each trace's main run only")
    p.add_argument("--budget-seqs", type=int, default=64,
                   help="paged vs contiguous on (b): a KV budget of this many exact "
                        "(prompt + max_new_tokens) reservations")
    p.add_argument("--max-len", type=int, default=None,
                   help="the 'maximum length' a contiguous server reserves (default: the model's context)")
    p.add_argument("--max-batch-tokens", type=int, default=None)
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--max-running", type=int, default=256)
    p.add_argument("--decode-reserve", type=float, default=0.25)
    p.add_argument("--temperature", type=float, default=0.8, help="trace (d)'s sampling temperature")
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--profile", action="store_true", help="synchronise around forwards (GPU time)")
    p.add_argument("--hf-baseline", action="store_true",
                   help="add transformers' numbers (--hf-json, written by bench/hf_baseline.py)")
    p.add_argument("--hf-json", default=str(HERE / "results" / "hf_baseline.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tp", type=int, default=1,
                   help="tensor parallel ranks (NCCL on GPUs 0..N-1, gloo on cpu); runs each trace's "
                   "main configuration only, after the same runs at TP 1 (see --tp-baseline)")
    p.add_argument("--pool-gib", type=float, default=None,
                   help="KV pool of this many GiB (per GPU with --tp: TP N's shards hold fewer "
                   "heads per token, so more tokens; FP8 pools hold twice the tokens)")
    p.add_argument("--tp-baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="with --tp N > 1: also run TP 1 first, same process and settings")
    p.add_argument("--json", default=None)
    p.add_argument("--png", default=None)
    args = p.parse_args(argv)
    if args.kv_dtype not in KV_DTYPES:  # before any work, in one line
        print(f"serve.py: error: --kv-dtype {args.kv_dtype!r} is not one of "
              f"{', '.join(KV_DTYPES)}", file=sys.stderr)
        return 2
    if args.pool_gib is not None and not (0 < args.pool_gib < float("inf")):
        print(f"serve.py: error: --pool-gib must be > 0, got {args.pool_gib}", file=sys.stderr)
        return 2
    if args.pool_gib is not None and args.pool_tokens is not None:
        print("serve.py: error: give --pool-tokens or --pool-gib, not both", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    shape = args.model_shape or ("tiny" if cpu else "llama3-8b")
    dtype = {"auto": torch.float32 if cpu else torch.bfloat16, "bfloat16": torch.bfloat16,
             "float16": torch.float16, "float32": torch.float32}[args.dtype]
    if args.scale is None:
        args.scale = 1.0 / 16 if cpu else 1.0
    if args.max_batch_tokens is None:
        args.max_batch_tokens = 512 if cpu else 8192
    if args.chunk_size is None:
        args.chunk_size = 256 if cpu else 8192
    if cpu:
        torch.set_num_threads(1)  # a tiny model: intra-op threads only contend
    if args.tp > 1:
        return main_tp(args, device, shape, dtype)
    t = time.perf_counter()
    model = build_model(shape, device, dtype, args.seed)
    print(f"[serve] model {shape} {str(dtype).replace('torch.', '')} on {device} in "
          f"{time.perf_counter() - t:.1f}s", flush=True)
    ceil = measure_ceilings(device, dtype)
    print(f"[serve] ceilings: matmul {ceil['matmul_flops'] / 1e12:.1f} TFLOP/s, read stream "
          f"{ceil['read_bytes'] / 1e12:.2f} TB/s", flush=True)
    kv_dt = kv_cache_dtype(args.kv_dtype, dtype)
    bpt = model.config.kv_bytes_per_token(kv_dt)
    if args.pool_tokens is None:
        args.pool_tokens = _default_pool(args, model, device, kv_dt)
    pool_bytes = args.pool_tokens * bpt  # the byte budget --kv-compare's model-dtype run gets
    max_len = args.max_len or model.config.max_seq_len
    print(f"[serve] KV pool {args.pool_tokens} tokens ({pool_bytes / GiB:.3g} GiB, "
          f"{kv_dtype_name(kv_dt)})", flush=True)
    traces = [t for t in args.traces.split(",") if t]
    results: list[dict[str, Any]] = []

    def go(trace: str, label: str, **kw: Any) -> dict[str, Any]:
        kw.setdefault("pool_tokens", args.pool_tokens)
        r = run_trace(model, trace, args, label, ceil=ceil, **kw)
        results.append(r)
        print(fmt(r), flush=True)
        return r

    # Warm-up (not reported): builds or loads the kernels and touches every code path once.
    t = time.perf_counter()
    warm = argparse.Namespace(**{**vars(args), "requests": 8, "scale": min(args.scale, 0.125),
                                 "graphs": False})
    run_trace(model, "parallel", warm, "warm-up", pool_tokens=min(args.pool_tokens, 1 << 16), ceil=ceil)
    print(f"[serve] warm-up {time.perf_counter() - t:.1f}s", flush=True)
    print(HEADER, flush=True)
    ratios: dict[str, float] = {}
    comparisons: dict[str, dict[str, Any]] = {}
    for name in traces:
        outs: list[Completion] = []
        main_run = go(name, f"{name}" + (f" {args.kv_dtype}" if args.kv_dtype != "auto" else ""),
                      outputs=outs)
        if args.kv_compare and kv_dt != dtype:
            base_tokens = pool_bytes // model.config.kv_bytes_per_token(dtype) // 256 * 256
            base_outs: list[Completion] = []
            base = go(name, f"{name} {kv_dtype_name(dtype)} KV", kv_dtype="auto",
                      pool_tokens=base_tokens, outputs=base_outs)
            agr = compare(base_outs, outs)
            ratio = main_run["total_tokens_per_s"] / base["total_tokens_per_s"]
            ratios[f"{args.kv_dtype}/{kv_dtype_name(dtype)} KV ({name})"] = ratio
            comparisons[name] = {
                "pool_gib": pool_bytes / GiB, "agreement": agr.to_dict(),
                "tokens_per_s": {args.kv_dtype: main_run["total_tokens_per_s"],
                                 kv_dtype_name(dtype): base["total_tokens_per_s"]},
                "output_tokens_per_s": {args.kv_dtype: main_run["output_tokens_per_s"],
                                        kv_dtype_name(dtype): base["output_tokens_per_s"]},
                "pool_tokens": {args.kv_dtype: main_run["pool_tokens"],
                                kv_dtype_name(dtype): base["pool_tokens"]},
                "peak_kv_in_use_tokens": {args.kv_dtype: main_run["peak_kv_in_use_tokens"],
                                          kv_dtype_name(dtype): base["peak_kv_in_use_tokens"]},
                "preemptions": {args.kv_dtype: main_run["preemptions"],
                                kv_dtype_name(dtype): base["preemptions"]},
            }
            print(f"[serve] {name} at {pool_bytes / GiB:.3g} GiB of KV: {args.kv_dtype} "
                  f"{main_run['total_tokens_per_s']:.0f} tok/s ({main_run['output_tokens_per_s']:.0f} "
                  f"out), pool {main_run['pool_tokens']} tokens, peak in use "
                  f"{main_run['peak_kv_in_use_tokens']}, {main_run['preemptions']} preemptions | "
                  f"{kv_dtype_name(dtype)} {base['total_tokens_per_s']:.0f} tok/s "
                  f"({base['output_tokens_per_s']:.0f} out), pool {base['pool_tokens']} tokens, "
                  f"peak in use {base['peak_kv_in_use_tokens']}, {base['preemptions']} preemptions "
                  f"| {ratio:.2f}x", flush=True)
            print(f"[serve] {name} token agreement ({args.kv_dtype} vs {kv_dtype_name(dtype)} KV): "
                  f"{agr.summary()}", flush=True)
        if not args.extra_runs:
            continue
        if name == "shared_prefix":
            off = go(name, f"{name} radix off", radix=False)
            ratios["radix on/off (a)"] = main_run["total_tokens_per_s"] / off["total_tokens_per_s"]
            go(name, f"{name} page 1", page_size=1)
        if name == "unique":
            tr = make_trace(name, 1, model.config.vocab_size, args.seed, args.scale).initial()[0]
            per = len(tr.prompt) + tr.max_new_tokens
            budget = -(-args.budget_seqs * per // 16) * 16
            print(f"[serve] (b) KV budget {budget} tokens: {budget // per} exact reservations of "
                  f"{per}, {budget // max_len} of the maximum length {max_len}", flush=True)
            paged = go(name, f"{name} paged, budget", pool_tokens=budget)
            if max_len <= budget:
                cmax = go(name, f"{name} contig max-len {max_len}", pool_tokens=budget,
                          admission="contiguous", contiguous_len=max_len)
                ratios[f"paged/contiguous max-len {max_len} (b)"] = (
                    paged["total_tokens_per_s"] / cmax["total_tokens_per_s"])
            else:
                print(f"[serve] max length {max_len} exceeds the budget: no max-length baseline",
                      flush=True)
            cont = go(name, f"{name} contig exact (oracle)", pool_tokens=budget,
                      admission="contiguous")
            ratios["paged/contiguous exact-oracle (b)"] = (
                paged["total_tokens_per_s"] / cont["total_tokens_per_s"])
    hf_path = Path(args.hf_json)
    hf = load_hf(hf_path) if args.hf_baseline else {}
    hf_meta = {}
    if hf:  # what the kept transformers run measured (its request count may differ from ours)
        data = json.loads(hf_path.read_text())
        hf_meta = {k: data[k] for k in ("requests_per_trace", "scale", "model_shape", "num_layers",
                                         "attn_implementation", "transformers_version", "device")
                   if k in data}
    elif args.hf_baseline:
        print(f"[serve] --hf-baseline: no usable {hf_path} (run bench/hf_baseline.py)", flush=True)
    vs_hf: dict[str, dict[str, Any]] = {}
    for name, row in hf.items():
        mine = next((r for r in results if r["label"] == name), None)
        if mine is not None:
            ratio = mine["total_tokens_per_s"] / float(row["total_tokens_per_s"])
            ratios[f"vs transformers ({name})"] = ratio
            vs_hf[name] = {"ratio": ratio, "engine_total_tokens_per_s": mine["total_tokens_per_s"],
                           "engine_requests": mine["requests"],
                           "transformers_total_tokens_per_s": row["total_tokens_per_s"],
                           "transformers_requests": row.get("requests")}
            print(f"[serve] vs transformers ({name}): {ratio:.1f}x total tokens/s "
                  f"({mine['total_tokens_per_s']:.0f} over {mine['requests']} requests vs "
                  f"{float(row['total_tokens_per_s']):.0f} over {row.get('requests', '?')} requests; "
                  f"target >= 10x)", flush=True)
    for k, v in ratios.items():
        print(f"[serve] {k}: {v:.2f}x", flush=True)
    report = {"model_shape": shape, "dtype": str(dtype).replace("torch.", ""), "device": str(device),
              "gpu": torch.cuda.get_device_name(device) if not cpu else None,
              "model": model.config.to_dict() if hasattr(model.config, "to_dict") else {},
              "ceilings": ceil, "args": vars(args), "results": results, "ratios": ratios,
              "kv_dtype": kv_dtype_name(kv_dt), "kv_compare": comparisons,
              "transformers_total_tokens_per_s": {k: v["total_tokens_per_s"] for k, v in hf.items()},
              "vs_transformers": vs_hf, "transformers_run": hf_meta}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    if args.png:
        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        plot(results, ratios, Path(args.png))
    return 0


def _default_pool(args: argparse.Namespace, model: Any, device: torch.device,
                  kv_dt: Optional[torch.dtype] = None) -> int:
    """Pool tokens: --pool-tokens, else --pool-gib, else 80% of free GPU memory past 8 GiB (CPU:
    65536), in tokens of the pool's element type ``kv_dt`` (default: the model's dtype)."""
    if args.pool_tokens is not None:
        return int(args.pool_tokens)
    bpt = model.config.kv_bytes_per_token(kv_dt or model.dtype)
    if getattr(args, "pool_gib", None):
        return int(args.pool_gib * GiB / bpt) // 256 * 256
    if device.type == "cpu":
        return 1 << 16
    free, _ = torch.cuda.mem_get_info(device)
    return int(0.80 * (free - 8 * GiB) / bpt) // 256 * 256


def main_tp(args: argparse.Namespace, device: torch.device, shape: str, dtype: torch.dtype) -> int:
    """--tp N: each trace's main configuration at TP 1 (unless --no-tp-baseline), then at TP N
    (rank r on GPU r), equal per-GPU limits (max running, batch tokens; a pool sized from each
    run's own free memory, so TP N holds more tokens per GPU byte). Reports tokens/s, the ratio,
    the scaling efficiency (ratio / N) and rank 0's all-reduce time per step."""
    import functools

    from radixkv.engine.checkpoint import model_from_shape
    from radixkv.engine.tp import TensorParallel

    factory = functools.partial(model_from_shape, shape, dtype=dtype, seed=args.seed)
    traces = [t for t in args.traces.split(",") if t]
    ceil = measure_ceilings(device, dtype)
    results: list[dict[str, Any]] = []

    def runs(model: Any, tp: Any, label: str) -> None:
        kv_dt = kv_cache_dtype(args.kv_dtype, dtype)
        pool = _default_pool(args, model, device, kv_dt)
        bpt = model.config.kv_bytes_per_token(kv_dt)
        print(f"[serve] {label}: KV pool {pool} tokens ({pool * bpt / GiB:.1f} GiB per GPU)",
              flush=True)
        warm = argparse.Namespace(**{**vars(args), "requests": 8, "scale": min(args.scale, 0.125),
                                     "graphs": False})
        run_trace(model, "parallel", warm, "warm-up", pool_tokens=min(pool, 1 << 16), ceil=ceil,
                  tp=tp)
        for name in traces:
            r = run_trace(model, name, args, f"{label} {name}", pool_tokens=pool, ceil=ceil, tp=tp)
            results.append(r)
            print(fmt(r) + f"  allreduce {r['allreduce_ms_per_step']:.2f} ms/step", flush=True)

    print(HEADER, flush=True)
    if args.tp_baseline:
        model = factory(device)
        runs(model, None, "tp1")
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    t = time.perf_counter()
    with TensorParallel(factory, args.tp, device, timeout_s=600) as tp:
        print(f"[serve] tp {args.tp}: ranks up in {time.perf_counter() - t:.1f}s", flush=True)
        runs(tp.model, tp, f"tp{args.tp}")
    ratios: dict[str, float] = {}
    for name in traces:
        one = next((r for r in results if r["label"] == f"tp1 {name}"), None)
        many = next(r for r in results if r["label"] == f"tp{args.tp} {name}")
        if one is not None:
            ratio = many["total_tokens_per_s"] / one["total_tokens_per_s"]
            ratios[f"tp{args.tp}/tp1 ({name})"] = ratio
            ratios[f"scaling efficiency ({name})"] = ratio / args.tp
    for k, v in ratios.items():
        print(f"[serve] {k}: {v:.2f}" + ("x" if "/" in k else ""), flush=True)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    report = {"model_shape": shape, "dtype": str(dtype).replace("torch.", ""), "device": str(device),
              "tp": args.tp, "gpu": gpu,
              "ceilings": ceil, "args": vars(args), "results": results, "ratios": ratios}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
