"""``radixkv demo``: replay a built-in workload through the engine, verify it, report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from radixkv.engine import workloads
from radixkv.engine.engine import Engine, EngineConfig
from radixkv.engine.model import ModelConfig, TinyLlama
from radixkv.engine.report import build_report, render
from radixkv.engine.request import Completion
from radixkv.engine.scheduler import SchedulerConfig
from radixkv.engine.verify import verify

EOS_TOKEN_ID = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixkv", description="radixkv command line")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="serve a built-in workload with radixkv and verify every token",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--workload", choices=workloads.NAMES, default="all",
                   help="multi-turn chat, few-shot with a long shared prefix, parallel sampling, "
                   "or all three interleaved")
    d.add_argument("--device", default="cpu", help="cpu, or cuda (the kernels)")
    d.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="auto: float32 on cpu, bfloat16 on cuda (the kernels take fp16/bf16)")
    d.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    d.add_argument("--pool-tokens", type=int, default=1024,
                   help="KV pool size in tokens (small enough that the default run evicts and preempts)")
    d.add_argument("--page-size", type=int, default=16, help="KV page size in tokens")
    d.add_argument("--radix", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse cached prefixes across requests")
    d.add_argument("--max-batch-tokens", type=int, default=256,
                   help="tokens computed per step (decodes + prefill chunks)")
    d.add_argument("--chunk-size", type=int, default=128, help="chunked-prefill chunk")
    d.add_argument("--seed", type=int, default=0, help="workload and model weights")
    d.add_argument("--layers", type=int, default=4, help="model layers")
    d.add_argument("--hidden", type=int, default=128, help="model hidden size")
    d.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                   help="recompute every sequence densely and compare tokens")
    d.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads; the model is tiny, so more threads mostly add overhead")
    d.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    return p


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def demo(args: argparse.Namespace) -> int:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("radixkv demo: --device cuda but torch sees no GPU (use --device cpu)", file=sys.stderr)
        return 2
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = _dtype(args.dtype, device)
    model = TinyLlama(ModelConfig(num_layers=args.layers, hidden_size=args.hidden, seed=args.seed),
                      device, dtype)
    config = EngineConfig(
        pool_tokens=args.pool_tokens, page_size=args.page_size, radix=args.radix,
        eos_token_id=EOS_TOKEN_ID, keep_logits=args.verify,
        scheduler=SchedulerConfig(max_batch_tokens=args.max_batch_tokens, chunk_size=args.chunk_size),
    )
    engine = Engine(model, config)
    wl = workloads.build(args.workload, args.seed, model.config.vocab_size)
    console = Console(stderr=True, quiet=args.quiet)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task(f"serving {wl.name}", total=wl.total_requests, info="")

        def on_step(finished: list[Completion]) -> None:
            s = engine.stats
            progress.update(task, advance=len(finished),
                            info=f"step {s.steps}, {s.generated_tokens} tokens")

        completions = engine.run(wl.requests, wl.on_finish, on_step=on_step)
    result = None
    if args.verify:
        t0 = time.perf_counter()
        with console.status("verifying against dense recomputation"):
            result = verify(model, completions, EOS_TOKEN_ID)
        verify_s = time.perf_counter() - t0
    backend = "reference" if device.type == "cpu" else _ops_backend(device)
    report = build_report(engine, wl.name, args.seed, backend, result)
    if result is not None:
        report["verify"]["wall_s"] = verify_s
    render(report, Console(quiet=args.quiet))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    # bf16 kernels and a bf16 dense path may round differently; exactness is a float32 claim.
    return 1 if result is not None and not result.ok and dtype == torch.float32 else 0


def _ops_backend(device: torch.device) -> str:
    import radixkv.ops

    return str(radixkv.ops.backend(device))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return demo(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
