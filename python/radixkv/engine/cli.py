"""``radixkv demo``: replay a built-in workload through the engine, verify it, report.

Every argument is checked before any work (model loading, serving): a bad one gets one line on
stderr and exit status 2, as argparse's own errors do.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, NoReturn, Sequence

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import radixkv as rk
from radixkv.engine import workloads
from radixkv.engine.checkpoint import (
    CheckpointInfo,
    inspect_checkpoint,
    load_model,
    model_from_shape,
)
from radixkv.engine.agreement import compare
from radixkv.engine.engine import Engine, EngineConfig
from radixkv.engine.kv import KV_DTYPES, kv_cache_dtype, kv_dtype_name, pool_tokens_for_bytes
from radixkv.engine.model import LlamaModel, ModelConfig
from radixkv.engine.report import build_report, render
from radixkv.engine.request import Completion, Request
from radixkv.engine.scheduler import SchedulerConfig
from radixkv.engine.shapes import SHAPES, shape_config
from radixkv.engine.verify import DenseReference, Reference, TransformersReference, verify

EOS_TOKEN_ID = 1  # the demo's random-weight models: workloads draw prompt tokens from [2, vocab)
DEFAULT_SHAPE = "tiny"
_TINY_LAYERS, _TINY_HIDDEN = 4, 128  # the demo's default model (fast and exact on a CPU)
_Fail = Callable[[str], NoReturn]


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block): ``radixkv demo: error: ...``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _int_at_least(low: int) -> type[int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse  # type: ignore[return-value]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


_positive_float.__name__ = "number > 0"


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="radixkv", description="radixkv command line")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    d = sub.add_parser("demo", help="serve a built-in workload with radixkv and verify every token",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--workload", choices=workloads.NAMES, default="all",
                   help="multi-turn chat, few-shot with a long shared prefix, parallel sampling, "
                   "or all three interleaved")
    model = d.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="PATH",
                       help="a Hugging Face checkpoint folder (config.json + *.safetensors) of a "
                       "Llama, Qwen2 or Mistral model")
    model.add_argument("--model-shape", metavar="NAME", choices=SHAPES, default=None,
                       help=f"random weights of a named shape ({', '.join(SHAPES)}); "
                       f"default {DEFAULT_SHAPE}")
    d.add_argument("--device", default="cpu", help="cpu, or cuda (the kernels)")
    d.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="auto: float32 on cpu, bfloat16 on cuda (the kernels take fp16/bf16)")
    d.add_argument("--kv-dtype", choices=list(KV_DTYPES), default="auto",
                   help="KV pool element type: auto (the model's dtype), fp8 (= fp8_e4m3, "
                   "float8_e4m3fn) or fp8_e5m2, with per-layer scales from the checkpoint "
                   "(self_attn.k_scale / v_scale / kv_scale) or else 1.0; an FP8 pool takes "
                   "half a 16-bit pool's bytes per token. A run with an FP8 pool also serves the "
                   "workload with a model-dtype pool and reports token agreement (see --compare)")
    d.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True,
                   help="with an FP8 --kv-dtype: also serve with a model-dtype pool (same "
                   "--pool-tokens, or the same bytes with --pool-mib) and report the share of "
                   "generated positions whose tokens agree")
    d.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    pool = d.add_mutually_exclusive_group()
    pool.add_argument("--pool-tokens", type=_int_at_least(1), default=1024,
                      help="KV pool size in tokens (slots), a multiple of --page-size, whatever "
                      "--kv-dtype is (small enough that the default run evicts cached prefixes; "
                      "smaller pools also preempt)")
    pool.add_argument("--pool-mib", type=_positive_float, default=None, metavar="MIB",
                      help="KV pool size in MiB instead: as many whole pages as fit at --kv-dtype "
                      "(an FP8 pool holds twice the tokens of a 16-bit one, four times float32's)")
    d.add_argument("--page-size", type=_int_at_least(1), default=16,
                   help="KV page size in tokens (1, 16 or 64 on a GPU)")
    d.add_argument("--radix", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse cached prefixes across requests")
    d.add_argument("--max-batch-tokens", type=_int_at_least(1), default=256,
                   help="tokens computed per step (decodes + prefill chunks)")
    d.add_argument("--chunk-size", type=_int_at_least(1), default=128,
                   help="chunked-prefill chunk")
    d.add_argument("--seed", type=_int_at_least(0), default=0, help="workload and model weights")
    d.add_argument("--layers", type=_int_at_least(1), default=None,
                   help=f"model layers of a random-weight model (tiny: {_TINY_LAYERS})")
    d.add_argument("--hidden", type=_int_at_least(2), default=None,
                   help=f"hidden size of a random-weight model (tiny: {_TINY_HIDDEN})")
    d.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                   help="recompute every sequence with a reference model and compare tokens")
    d.add_argument("--reference", choices=["auto", "transformers", "dense"], default="auto",
                   help="what verification recomputes with: transformers' own model of the same "
                   "weights, or this engine's model with dense attention; auto: transformers "
                   "for a --model checkpoint when transformers is installed, else dense")
    d.add_argument("--threads", type=_int_at_least(0), default=1,
                   help="torch CPU threads; the model is tiny, so more threads mostly add overhead")
    d.add_argument("--tp", type=_int_at_least(1), default=1,
                   help="tensor parallel ranks: worker processes joined by torch.distributed "
                   "(gloo on cpu, NCCL on cuda: rank r on GPU r)")
    d.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    d.set_defaults(parser=d)  # checks after parsing report as "radixkv demo: error: ..."
    return p


@dataclass
class _Plan:
    """Everything resolved from the arguments before any work starts."""

    device: torch.device
    dtype: torch.dtype
    config: ModelConfig
    checkpoint: CheckpointInfo | None
    workload: workloads.Workload
    reference: str | None  # "transformers", "dense", or None (no verification)
    eos_token_id: int | None
    engine: EngineConfig
    baseline: EngineConfig | None = None  # the model-dtype pool an FP8 run is compared with


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _check_device(fail: _Fail, text: str) -> torch.device:
    try:
        device = torch.device(text)
    except RuntimeError:
        fail(f"--device {text!r} is not a device (use cpu or cuda)")
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        fail(f"--device {text!r}: only cpu and cuda are supported")
    if not torch.cuda.is_available():
        fail(f"--device {text}: torch sees no GPU (use --device cpu)")
    if device.index is not None and device.index >= torch.cuda.device_count():
        fail(f"--device {text}: there are {torch.cuda.device_count()} GPUs")
    return device


def _check_json(fail: _Fail, text: str) -> None:
    path = Path(text)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        fail(f"--json {text}: is a directory")
    if not parent.is_dir():
        fail(f"--json {text}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(f"--json {text}: not writable")


def _all_requests(wl: workloads.Workload) -> list[Request]:
    """Every request the workload can submit, follow-ups included, each at its longest (every
    answer assumed to run to max_new_tokens)."""
    out: list[Request] = []
    todo = list(wl.requests)
    while todo:
        req = todo.pop()
        out.append(req)
        n, m = req.params.n, req.params.max_new_tokens
        todo.extend(wl.on_finish(Completion(req, [[2] * m for _ in range(n)], 0, 0)))
    return out


def _check_fits(fail: _Fail, engine: EngineConfig, mc: ModelConfig, reqs: list[Request],
                which: str = "", pool_flag: str = "") -> None:
    """Refuse a pool or context too small for the workload's largest request before anything
    runs, with the engine's own submission check (``Engine.check``) on a pool manager alone."""
    from types import SimpleNamespace

    from radixkv.engine import engine as engine_module
    from radixkv.engine.memory import KVManager

    try:
        kv = KVManager(engine.pool_tokens, engine.page_size, engine.radix)
    except rk.InvalidArgument as e:
        fail(f"{which}{pool_flag or f'--pool-tokens {engine.pool_tokens}'} / --page-size "
             f"{engine.page_size}: {e}")
    # Engine.check reads only the model config, the pool manager and the engine config.
    probe = SimpleNamespace(model=SimpleNamespace(config=mc), kv=kv, config=engine)
    for req in reqs:
        try:
            engine_module.Engine.check(probe, req)  # type: ignore[arg-type]
        except rk.InvalidArgument as e:
            context = int(req.prompt.size) + req.params.max_new_tokens > mc.max_seq_len
            flag = ("the model's context" if context
                    else pool_flag or f"--pool-tokens {engine.pool_tokens}")
            fail(f"{which}{flag} too small for this workload: {e}")


def _plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> _Plan:
    def fail(message: str) -> NoReturn:
        parser.error(message)

    device = _check_device(fail, args.device)
    dtype = _dtype(args.dtype, device)
    if args.json:
        _check_json(fail, args.json)
    checkpoint = None
    if args.model is not None:
        if args.layers is not None or args.hidden is not None:
            fail("--layers/--hidden change random-weight models only, not a --model checkpoint")
        try:
            checkpoint = inspect_checkpoint(args.model)
        except rk.InvalidArgument as e:
            fail(f"--model {args.model}: {e}")
        config = checkpoint.config
    else:
        shape = args.model_shape or DEFAULT_SHAPE
        overrides = {k: v for k, v in (("num_layers", args.layers), ("hidden_size", args.hidden))
                     if v is not None}
        try:
            config = replace(shape_config(shape), seed=args.seed, **overrides)
        except (ValueError, rk.InvalidArgument) as e:
            fail(f"--model-shape {shape}: {e}")
    if device.type == "cuda":
        import radixkv.ops

        if dtype not in radixkv.ops.SUPPORTED_DTYPES:
            fail(f"--dtype {args.dtype}: the GPU kernels take float16 or bfloat16")
        if config.head_dim not in radixkv.ops.SUPPORTED_HEAD_DIMS:
            fail(f"head_dim {config.head_dim} has no GPU kernel (supported: "
                 f"{', '.join(map(str, radixkv.ops.SUPPORTED_HEAD_DIMS))})")
        if args.page_size not in radixkv.ops.SUPPORTED_PAGE_SIZES:
            fail(f"--page-size {args.page_size} has no GPU kernel (supported: "
                 f"{', '.join(map(str, radixkv.ops.SUPPORTED_PAGE_SIZES))})")
    if args.tp > 1:
        from radixkv.engine.parallel_model import shard_plan

        try:
            shard_plan(config, 0, args.tp)
        except rk.InvalidArgument as e:
            fail(f"--tp {args.tp}: {e}")
        if device.type == "cuda" and (device.index or 0) + args.tp > torch.cuda.device_count():
            fail(f"--tp {args.tp} from {device}: there are {torch.cuda.device_count()} GPUs")
    reference = None
    if args.verify:
        has_tf = importlib.util.find_spec("transformers") is not None
        if args.reference == "transformers" and not has_tf:
            fail("--reference transformers: transformers is not installed "
                 "(pip install 'transformers==5.17.0')")
        if args.reference == "auto":
            reference = "transformers" if checkpoint is not None and has_tf else "dense"
        else:
            reference = args.reference
    if checkpoint is not None:
        eos = checkpoint.config.eos_token_ids[0] if checkpoint.config.eos_token_ids else None
    else:
        eos = EOS_TOKEN_ID
    kv_dtype = kv_cache_dtype(args.kv_dtype, dtype)  # argparse's choices keep it valid

    def pool_tokens(cache_dtype: torch.dtype) -> int:
        if args.pool_mib is None:
            return int(args.pool_tokens)
        return pool_tokens_for_bytes(config, int(args.pool_mib * 2**20), args.page_size,
                                     cache_dtype)

    engine = EngineConfig(
        pool_tokens=pool_tokens(kv_dtype), page_size=args.page_size, radix=args.radix,
        kv_dtype=args.kv_dtype, eos_token_id=eos, keep_logits=args.verify,
        scheduler=SchedulerConfig(max_batch_tokens=args.max_batch_tokens,
                                  chunk_size=args.chunk_size),
    )
    baseline = None
    if kv_dtype != dtype and args.compare:
        baseline = replace(engine, kv_dtype="auto", pool_tokens=pool_tokens(dtype))
    reqs = _all_requests(workloads.build(args.workload, args.seed, config.vocab_size))

    def flag(cfg: EngineConfig, cache_dtype: torch.dtype) -> str:
        if args.pool_mib is None:
            return ""
        return (f"--pool-mib {args.pool_mib:g} ({cfg.pool_tokens} tokens at "
                f"{kv_dtype_name(cache_dtype)})")

    _check_fits(fail, engine, config, reqs, pool_flag=flag(engine, kv_dtype))
    if baseline is not None:
        _check_fits(fail, baseline, config, reqs, "the --compare run's model-dtype pool: ",
                    flag(baseline, dtype))
    # A fresh workload to serve: the dry run above advanced its follow-up state.
    wl = workloads.build(args.workload, args.seed, config.vocab_size)
    return _Plan(device, dtype, config, checkpoint, wl, reference, eos, engine, baseline)


def _factory(args: argparse.Namespace, plan: _Plan) -> Callable[[torch.device], LlamaModel]:
    """factory(device) -> the model (picklable: tensor-parallel ranks build their own)."""
    if plan.checkpoint is not None:
        return functools.partial(load_model, plan.checkpoint.path, dtype=plan.dtype)
    shape = args.model_shape or DEFAULT_SHAPE
    overrides = {k: v for k, v in (("num_layers", args.layers), ("hidden_size", args.hidden))
                 if v is not None}
    return functools.partial(model_from_shape, shape, dtype=plan.dtype, seed=args.seed,
                             **overrides)


def _build_model(args: argparse.Namespace, plan: _Plan) -> LlamaModel:
    return _factory(args, plan)(plan.device)


def _reference(plan: _Plan, model: LlamaModel) -> Reference:
    if plan.reference == "transformers":
        if plan.checkpoint is not None:
            return TransformersReference.from_pretrained(str(plan.checkpoint.path), plan.device,
                                                         plan.dtype)
        from radixkv.engine.checkpoint import hf_model

        return TransformersReference(hf_model(model))
    return DenseReference(model)


def demo(args: argparse.Namespace) -> int:
    plan = _plan(args.parser, args)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    tp = None
    if args.tp > 1:
        from radixkv.engine.tp import TensorParallel

        # The full model stays on rank 0 as the verification reference.
        tp = TensorParallel(_factory(args, plan), args.tp, plan.device, keep_full=True,
                            threads=args.threads)
        assert tp.full is not None
        model = tp.full
        make_engine: Callable[[EngineConfig], Engine] = tp.engine
    else:
        model = _build_model(args, plan)
        make_engine = functools.partial(Engine, model)
    try:
        return _serve(args, plan, model, make_engine)
    finally:
        if tp is not None:
            tp.close()


def _run(engine: Engine, wl: workloads.Workload, console: Console, label: str
         ) -> list[Completion]:
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task(f"serving {wl.name}{label}", total=wl.total_requests, info="")

        def on_step(finished: list[Completion]) -> None:
            s = engine.stats
            progress.update(task, advance=len(finished),
                            info=f"step {s.steps}, {s.generated_tokens} tokens")

        return engine.run(wl.requests, wl.on_finish, on_step=on_step)


def _serve(args: argparse.Namespace, plan: _Plan, model: LlamaModel,
           make_engine: Callable[[EngineConfig], Engine]) -> int:
    wl = plan.workload
    console = Console(stderr=True, quiet=args.quiet)
    engine = make_engine(plan.engine)
    kv_name = kv_dtype_name(engine.kv_dtype)
    completions = _run(engine, wl, console, f" ({kv_name} KV)" if plan.baseline else "")
    agreement = None
    if plan.baseline is not None:
        base_engine = make_engine(plan.baseline)
        # The same requests again (a fresh workload: follow-ups come from this run's answers).
        base_wl = workloads.build(args.workload, args.seed, plan.config.vocab_size)
        base = _run(base_engine, base_wl, console,
                    f" ({kv_dtype_name(base_engine.kv_dtype)} KV, for comparison)")
        agreement = {"baseline_kv_dtype": kv_dtype_name(base_engine.kv_dtype),
                     "baseline_pool_tokens": base_engine.pool.num_slots,
                     "baseline_pool_bytes": base_engine.pool.nbytes,
                     "baseline_generated_tokens_per_s": (
                         base_engine.stats.generated_tokens / base_engine.stats.wall_s
                         if base_engine.stats.wall_s else 0.0),
                     **compare(base, completions).to_dict()}
        del base_engine
    result = None
    if plan.reference is not None:
        t0 = time.perf_counter()
        with console.status(f"verifying against {plan.reference} recomputation"):
            result = verify(model, completions, plan.eos_token_id, _reference(plan, model))
        verify_s = time.perf_counter() - t0
    backend = "reference" if plan.device.type == "cpu" else _ops_backend(plan.device)
    report = build_report(engine, wl.name, args.seed, backend, result)
    report["agreement"] = agreement
    if args.tp > 1:  # the table's model is the whole model; memory figures are per rank
        report["model"] = model.config.to_dict()
        report["tensor_parallel"] = {"ranks": args.tp,
                                     "kv_heads_per_rank": engine.model.config.num_kv_heads,
                                     "memory_figures": "per rank"}
    report["model_source"] = (str(plan.checkpoint.path) if plan.checkpoint is not None
                              else f"random weights, shape {args.model_shape or DEFAULT_SHAPE}")
    if result is not None:
        report["verify"]["wall_s"] = verify_s
    render(report, Console(quiet=args.quiet))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    # bf16 kernels and a bf16 reference may round differently, and an FP8 pool changes the
    # logits: exactness is a claim for float32 with a float32 pool.
    exact = plan.dtype == torch.float32 and engine.kv_dtype == plan.dtype
    return 1 if result is not None and not result.ok and exact else 0


def _ops_backend(device: torch.device) -> str:
    import radixkv.ops

    return str(radixkv.ops.backend(device))


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
