"""transformers' own continuous batching on the serving traces: the engine its users already have.

Same weights as radixkv's benchmark (``model_from_shape`` -> ``to_hf_state_dict``), same traces
(``bench/serve_traces.py``), served by ``model.init_continuous_batching`` (the manager behind
``generate_batch``) with ``attn_implementation="paged|sdpa"`` and transformers' default
``ContinuousBatchingConfig``. Requests are submitted through the manager's ``add_request`` so
that chat follow-ups enter as soon as their previous turn finishes (as they do in radixkv's run);
parallel sampling (n = 4) uses ``num_return_sequences`` (transformers forks the prompt's blocks).
EOS is disabled, so every sequence generates its ``max_new_tokens``.

Writes per trace: wall time, prompt / generated tokens, total and output tokens/s, TTFT p50/p99
(submit to first token, from transformers' per-token timestamps), TPOT p50/p99, the warm-up
time (graph capture, excluded from the wall time) and the request count, to
``bench/results/hf_baseline.json`` (``bench/serve.py --hf-baseline`` reads it).

    python bench/hf_baseline.py --requests 64                     # GPU: llama3-8b, bf16
    python bench/hf_baseline.py --device cpu --requests 4 --layers 1   # CPU smoke (tiny shape)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_traces import TRACES, Trace, TraceRequest, make_trace  # noqa: E402

from radixkv.engine.checkpoint import hf_model, model_from_shape  # noqa: E402
from radixkv.engine.shapes import SHAPES  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "hf_baseline.json"
ATTN = "paged|sdpa"


def _percentile(xs: list[float], q: float) -> Optional[float]:
    return float(np.percentile(xs, q)) if xs else None


def _all_requests(trace: Trace) -> list[TraceRequest]:
    """Every request of the trace, follow-ups included, answers at full length (sizing hints)."""
    out, todo = [], trace.initial()
    while todo:
        req = todo.pop()
        out.append(req)
        nxt = trace.follow_up(req, [2] * req.max_new_tokens)
        if nxt is not None:
            todo.append(nxt)
    return out


def run_trace(hf: Any, trace: Trace, temperature: float, timeout_s: float) -> dict[str, Any]:
    from transformers import ContinuousBatchingConfig, GenerationConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    initial = trace.initial()
    n = max(r.n for r in initial)
    if any(r.n != n for r in initial):
        raise ValueError(f"trace {trace.name}: one n per trace (num_return_sequences is global)")
    every = _all_requests(trace)
    gen = GenerationConfig(
        max_new_tokens=max(r.max_new_tokens for r in every), eos_token_id=-1, pad_token_id=0,
        do_sample=n > 1, temperature=temperature if n > 1 else None, top_k=0 if n > 1 else None,
        top_p=1.0 if n > 1 else None, num_return_sequences=n,
    )
    hints = WorkloadHints(max_prompt_length=max(len(r.prompt) for r in every),
                          max_generated_length=gen.max_new_tokens,
                          num_requests=sum(r.n for r in every))
    cb = None
    if hf.device.type == "cpu":
        # transformers sizes its cache from free GPU memory; on the CPU give it room for the
        # whole trace (blocks of its default 256 tokens).
        per_seq = [(len(r.prompt) + r.max_new_tokens) * r.n for r in every]
        cb = ContinuousBatchingConfig(num_blocks=sum(-(-t // 256) for t in per_seq) + 8,
                                      max_batch_tokens=256)
        # Its footprint check reads host memory through psutil, or sees 0 bytes without it.
        from transformers.generation.continuous_batching import cache as cb_cache

        cb_cache.PagedAttentionMemoryHandler.get_available_memory = lambda self: 4 << 30
    submitted: dict[str, tuple[TraceRequest, float]] = {}
    outputs: dict[str, list[list[int]]] = {}
    ttft: list[float] = []
    tpot: list[float] = []
    prompt_tokens = generated = sequences = 0
    t_warm = time.perf_counter()
    with hf.continuous_batching_context_manager(generation_config=gen, block=True, timeout=30,
                                                continuous_batching_config=cb,
                                                workload_hints=hints) as manager:
        t0 = time.perf_counter()
        warmup_s = t0 - t_warm

        def submit(req: TraceRequest) -> None:
            submitted[req.rid] = (req, time.perf_counter())
            manager.add_request(req.prompt, request_id=req.rid, max_new_tokens=req.max_new_tokens,
                                record_timestamps=True)

        for req in initial:
            submit(req)
        expected = sum(r.n for r in every)  # sequences, follow-ups included
        while sequences < expected:
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"trace {trace.name}: {sequences}/{expected} sequences after "
                                   f"{timeout_s:.0f} s")
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError(f"trace {trace.name}: transformers' generation thread died")
                continue
            if not result.is_finished():
                continue
            if result.error is not None:
                raise RuntimeError(f"trace {trace.name}: request {result.request_id} failed: "
                                   f"{result.error}")
            rid = result.request_id.split("__child#")[0]
            req, t_submit = submitted[rid]
            toks = list(result.generated_tokens)
            sequences += 1
            generated += len(toks)
            stamps = result.timestamps or []
            if stamps:
                ttft.append(stamps[0] - t_submit)
                if len(stamps) > 1:
                    tpot.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
            branches = outputs.setdefault(rid, [])
            branches.append(toks)
            if len(branches) == req.n:
                prompt_tokens += len(req.prompt)
                follow = trace.follow_up(req, branches[0])
                if follow is not None:
                    submit(follow)
        wall = time.perf_counter() - t0
    return {
        "trace": trace.name,
        "requests": len(outputs),
        "sequences": sequences,
        "prompt_tokens": prompt_tokens,
        "generated_tokens": generated,
        "wall_s": wall,
        "warmup_s": warmup_s,
        "total_tokens_per_s": (prompt_tokens + generated) / wall,
        "output_tokens_per_s": generated / wall,
        "ttft_s": {"p50": _percentile(ttft, 50), "p99": _percentile(ttft, 99)},
        "tpot_s": {"p50": _percentile(tpot, 50), "p99": _percentile(tpot, 99)},
        "sampling": f"n={n}, " + (f"temperature {temperature}" if n > 1 else "greedy"),
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model-shape", choices=SHAPES, default=None,
                   help="default: llama3-8b on cuda, tiny on cpu")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default="auto")
    p.add_argument("--requests", type=int, default=64,
                   help="per trace, as serve_traces counts them (chat: turns; parallel: sequences)")
    p.add_argument("--scale", type=float, default=None,
                   help="trace length scale (default 1 on cuda, 1/16 on cpu)")
    p.add_argument("--traces", default=",".join(TRACES))
    p.add_argument("--layers", type=int, default=None, help="override the shape's layer count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.8,
                   help="trace (d)'s sampling temperature")
    p.add_argument("--timeout", type=float, default=600.0, help="per trace, seconds")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch sees no GPU")
    if args.requests < 1:
        p.error("--requests must be >= 1")
    traces = [t for t in args.traces.split(",") if t]
    bad = [t for t in traces if t not in TRACES]
    if bad:
        p.error(f"unknown traces {bad} (choose from {', '.join(TRACES)})")
    if not args.out.parent.is_dir():
        p.error(f"--out: directory {args.out.parent} does not exist")
    shape = args.model_shape or ("llama3-8b" if device.type == "cuda" else "tiny")
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16,
             "float32": torch.float32}[args.dtype]
    scale = args.scale if args.scale is not None else (1.0 if device.type == "cuda" else 1 / 16)

    import transformers

    t0 = time.perf_counter()
    overrides = {"num_layers": args.layers} if args.layers else {}
    model = model_from_shape(shape, device, dtype, args.seed, **overrides)
    config = model.config
    hf = hf_model(model, attn_implementation=ATTN)
    del model  # transformers holds its own copy of the weights
    if device.type == "cuda":
        torch.cuda.empty_cache()
    build_s = time.perf_counter() - t0
    print(f"{shape} ({config.num_layers} layers) in {dtype} on {device}: transformers model "
          f"built in {build_s:.1f} s", flush=True)
    rows = []
    for name in traces:
        trace = make_trace(name, args.requests, config.vocab_size, args.seed, scale)
        row = run_trace(hf, trace, args.temperature, args.timeout)
        rows.append(row)
        ttft = row["ttft_s"]["p50"]
        print(f"{name:14s} {row['sequences']:4d} seqs  {row['wall_s']:7.1f} s  "
              f"{row['total_tokens_per_s']:9.0f} total tok/s  {row['output_tokens_per_s']:8.0f} "
              f"out tok/s  TTFT p50 {ttft if ttft is None else f'{ttft:.3f} s'}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report = {
        "engine": "transformers continuous batching (init_continuous_batching / add_request)",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "attn_implementation": ATTN,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "model_shape": shape,
        "num_layers": config.num_layers,
        "dtype": str(dtype).replace("torch.", ""),
        "requests_per_trace": args.requests,
        "scale": scale,
        "seed": args.seed,
        "eos": "disabled (every sequence runs to max_new_tokens)",
        "weights": "radixkv.engine.checkpoint.model_from_shape(shape, seed) via to_hf_state_dict",
        "traces": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(math.isfinite(r["total_tokens_per_s"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
