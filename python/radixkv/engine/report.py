"""The demo report: one JSON-able dict computed from the engine's counters and memory samples,
and its rendering as rich tables. Every figure is explained in ``FIELD_NOTES``."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from radixkv.engine.engine import Engine
from radixkv.engine.kv import KVPool, kv_dtype_name
from radixkv.engine.verify import VerifyResult

FIELD_NOTES = {
    "requests": "finished requests; sequences counts each parallel-sampling branch",
    "prefix_cache.hit_rate": "prompt tokens whose KV came from the radix cache at first admission / "
    "prompt tokens (the match is capped one token short of the prompt; parallel-sampling requests "
    "included)",
    "prefix_cache.prefill_tokens_saved": "prompt tokens not run through the model thanks to the cache",
    "prefix_cache.evicted_tokens": "cached tokens evicted (LRU leaves) to make room",
    "prefix_cache.deferred_admissions": "admissions put off one step because a prompt being "
    "prefilled shares a long prefix that will be published to the cache",
    "preemption": "running sequences preempted when the pool could not serve a step (recompute: "
    "their KV went to the cache unlocked) and the prefill tokens computed again on re-admission",
    "throughput": "generated (sampled) tokens and computed (prefill + decode) tokens per wall "
    "second of the engine loop, verification excluded",
    "memory.peak_in_use_tokens": "most KV slots held for running sequences at once (shared pages once)",
    "memory.sharing_factor": "sum of running sequences' KV lengths / slots held for them",
    "memory.schemes": "KV memory the running requests held, summed over steps (token-steps), "
    "under this engine and three alternatives on the same trace, with the share that holds no KV",
    "parallel": "forks of n > 1 requests onto the prompt's cached pages, copy-on-write copies of "
    "the partial last page, and the page-steps sharing saved over private copies",
    "host": "host time per step outside the forward (scheduling, metadata, packing; bookkeeping "
    "after the sampled tokens arrive)",
    "memory.kv_dtype": "the KV pool's element type; FP8 pools store K / V divided by a per-layer "
    "scale (the checkpoint's k_scale / v_scale when it stores them, else 1.0: memory.kv_scales) "
    "and take half a 16-bit pool's bytes per token",
    "agreement": "with an FP8 pool: the same workload served again with a model-dtype pool; the "
    "share of generated positions (by request and branch) whose tokens are equal, and where "
    "diverged sequences first differ (follow-up chat turns then get different prompts)",
    "verify": "every sequence recomputed with dense causal attention; each output token "
    "re-derived with the same sampling rule (greedy or seeded Gumbel) must match",
}


def _kv_scales(pool: KVPool) -> str:
    if pool.scale_source != "checkpoint":
        return "per layer, per tensor: 1.0"
    per_head = any(s.dim() for s in pool.k_scale + pool.v_scale)
    return f"per layer, from the checkpoint ({'per KV head' if per_head else 'per tensor'})"


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def _scheme(reserved: int, holding: int, ours: int) -> dict[str, float]:
    return {"reserved_token_steps": reserved, "waste": max(0.0, 1.0 - _ratio(holding, reserved)),
            "vs_this_engine": _ratio(reserved, ours)}


def build_report(engine: Engine, workload: str, seed: int, ops_backend: str,
                 verify: VerifyResult | None) -> dict[str, Any]:
    s = engine.stats
    cfg = engine.config
    mc = engine.model.config
    bpt = engine.pool.bytes_per_token
    tot = s.totals()
    peak = s.peaks()
    ps = engine.kv.page_size
    live = tot["logical_tokens"]
    held = tot["in_use_tokens"]
    max_len_reserved = tot["running_seqs"] * mc.max_seq_len
    busy_steps = max(1, s.steps - s.idle_steps)
    host = [t.host_outside_forward for t in s.timings]
    return {
        "workload": workload,
        "seed": seed,
        "device": str(engine.device),
        "dtype": str(engine.model.dtype).replace("torch.", ""),
        "kv_dtype": kv_dtype_name(engine.kv_dtype),
        "ops_backend": ops_backend,
        "model": mc.to_dict(),
        "engine": {
            "pool_tokens": cfg.pool_tokens,
            "kv_dtype": cfg.kv_dtype,
            "page_size": ps,
            "radix": cfg.radix,
            "admission": cfg.scheduler.admission,
            "max_batch_tokens": cfg.scheduler.max_batch_tokens,
            "chunk_size": cfg.scheduler.chunk_size,
            "eos_token_id": cfg.eos_token_id,
            "decode_graphs": engine.graphs is not None,
        },
        "requests": {
            "requests": s.requests_finished,
            "sequences": s.sequences_finished,
            "prompt_tokens": s.prompt_tokens,
            "generated_tokens": s.generated_tokens,
            "steps": s.steps,
            "mean_batch_tokens": _ratio(s.prefill_computed + s.decode_tokens, busy_steps),
            "refused": s.refused,
        },
        "prefix_cache": {
            "prompt_tokens": s.prompt_tokens,
            "cached_tokens": s.cached_tokens,
            "hit_rate": _ratio(s.cached_tokens, s.prompt_tokens),
            "prefill_tokens_computed": s.prefill_computed,
            "prefill_tokens_saved": s.cached_tokens,
            "prefill_chunks": s.prefill_chunks,
            "evicted_tokens": int(engine.kv.cache.evicted_tokens),
            "duplicate_pages_freed": engine.kv.duplicate_pages_freed,
            "deferred_admissions": engine.scheduler.deferred,
        },
        "preemption": {
            "preemptions": engine.scheduler.preemptions,
            "recomputed_tokens": s.recomputed_tokens,
        },
        "throughput": {
            "wall_s": s.wall_s,
            "forward_s": s.forward_s,
            "generated_tokens_per_s": _ratio(s.generated_tokens, s.wall_s),
            "computed_tokens_per_s": _ratio(s.prefill_computed + s.decode_tokens, s.wall_s),
        },
        "host": {
            "mean_ms_per_step": 1e3 * statistics.fmean(host) if host else 0.0,
            "graph_steps": s.graph_steps,
            "h2d_copies": s.h2d_copies,
        },
        "memory": {
            "kv_dtype": kv_dtype_name(engine.kv_dtype),
            "kv_scales": _kv_scales(engine.pool) if engine.pool.fp8 else None,
            "kv_bytes_per_token": bpt,
            "pool_tokens": engine.pool.num_slots,
            "pool_bytes": engine.pool.nbytes,
            "peak_in_use_tokens": peak["in_use_tokens"],
            "peak_in_use_bytes": peak["in_use_tokens"] * bpt,
            "peak_logical_kv_tokens": peak["logical_tokens"],
            "sharing_factor": _ratio(live, held),
            "schemes": {
                "this_engine": _scheme(held, live, held),
                "paged_no_sharing": _scheme(tot["logical_page_tokens"], live, held),
                "contiguous_exact_length": _scheme(tot["contiguous_tokens"], live, held),
                "contiguous_max_len": _scheme(max_len_reserved, live, held),
            },
        },
        "parallel": {
            "forks": engine.kv.forks,
            "cow_page_copies": engine.kv.cow_copies,
            "page_token_steps_saved": tot["logical_page_tokens"] - held,
            "saved_fraction": 1.0 - _ratio(held, tot["logical_page_tokens"]),
        },
        "verify": verify.to_dict() if verify is not None else None,
    }


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def render(report: dict[str, Any], console: Console) -> None:
    r, pc, th = report["requests"], report["prefix_cache"], report["throughput"]
    mem, par, ver = report["memory"], report["parallel"], report["verify"]
    pre, eng = report["preemption"], report["engine"]
    mc = report["model"]
    table = Table(title=f"radixkv demo: workload {report['workload']!r}, seed {report['seed']}",
                  show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    table.add_row("model", f"{mc['num_layers']} layers, hidden {mc['hidden_size']}, "
                  f"{mc['num_q_heads']}q/{mc['num_kv_heads']}kv heads x {mc['head_dim']}, "
                  f"vocab {mc['vocab_size']}; {report['dtype']} on {report['device']} "
                  f"(ops: {report['ops_backend']})")
    table.add_row("requests", f"{r['requests']} requests, {r['sequences']} sequences, "
                  f"{r['steps']} steps, {r['mean_batch_tokens']:.1f} tokens/step")
    table.add_row("tokens", f"{r['prompt_tokens']} prompt, {r['generated_tokens']} generated")
    table.add_row("prefix cache", f"hit rate {_pct(pc['hit_rate'])}: {pc['cached_tokens']} of "
                  f"{pc['prompt_tokens']} prompt tokens reused, {pc['prefill_tokens_computed']} "
                  f"computed; {pc['evicted_tokens']} evicted")
    table.add_row("preemption", f"{pre['preemptions']} preemptions (recompute), "
                  f"{pre['recomputed_tokens']} prefill tokens recomputed")
    table.add_row("throughput", f"{th['generated_tokens_per_s']:.0f} generated tokens/s, "
                  f"{th['computed_tokens_per_s']:.0f} computed tokens/s "
                  f"({th['wall_s']:.2f} s, {th['forward_s']:.2f} s in forward)")
    table.add_row("KV memory", f"one pool of {mem['pool_tokens']} tokens in pages of "
                  f"{eng['page_size']} ({_mib(mem['pool_bytes'])}, {mem['kv_dtype']}, "
                  f"{mem['kv_bytes_per_token']} B/token); peak in use "
                  f"{mem['peak_in_use_tokens']} ({_mib(mem['peak_in_use_bytes'])})")
    table.add_row("prefix sharing", f"{mem['sharing_factor']:.2f} logical KV tokens per held token")
    table.add_row("parallel sampling", f"{par['forks']} forks, {par['cow_page_copies']} "
                  f"copy-on-write page copies; sharing saved {par['page_token_steps_saved']:,} "
                  f"token-steps ({_pct(par['saved_fraction'])}) over private pages")
    if ver is None:
        table.add_row("verify", "skipped (--no-verify)")
    else:
        kv = report.get("kv_dtype", report["dtype"])
        if ver["ok"]:
            verdict = "[green]PASS[/green]"
        elif report["dtype"] == "float32" and kv == "float32":
            verdict = "[red]FAIL[/red]"
        elif kv != report["dtype"]:  # a quantised KV pool changes the logits; a token may flip
            verdict = f"[yellow]{kv} KV: not exact[/yellow]"
        else:  # kernels and the dense path round differently in 16-bit; a token may flip
            verdict = f"[yellow]{report['dtype']}: not exact[/yellow]"
        diff = ver["max_abs_logit_diff"]
        table.add_row("verify", f"{verdict}: {ver['tokens'] - ver['mismatched_tokens']}/"
                      f"{ver['tokens']} tokens of {ver['sequences']} sequences match "
                      f"{ver.get('reference', 'dense')} recomputation" + (f"; max |logit diff| {diff:.2e}" if diff is not None else ""))
        for line in ver["first_mismatches"]:
            table.add_row("", f"[red]{line}[/red]")
    agr = report.get("agreement")
    if agr:
        table.add_row(f"vs {agr['baseline_kv_dtype']} KV",
                      f"{100 * agr['rate']:.1f}% of {agr['positions']} generated positions equal "
                      f"to a run with a {agr['baseline_kv_dtype']} pool of "
                      f"{agr['baseline_pool_tokens']} tokens ({_mib(agr['baseline_pool_bytes'])}); "
                      f"{agr['identical_sequences']}/{agr['sequences']} sequences identical")
        if agr["diverged_sequences"]:
            table.add_row("", f"first divergence at position min {agr['first_divergence_min']}, "
                          f"median {agr['first_divergence_median']:g}, mean "
                          f"{agr['first_divergence_mean']:.1f} of {agr['diverged_sequences']} "
                          f"diverged sequences; {agr['same_prompt']} sequences had the same prompt "
                          f"({100 * agr['same_prompt_rate']:.1f}% of their positions equal)")
    console.print(table)
    schemes = Table(title="KV memory held for the running requests over the trace",
                    title_justify="left")
    for col in ("allocation scheme", "token-steps", "holding no KV", "vs this engine"):
        schemes.add_column(col, justify="left" if col == "allocation scheme" else "right")
    labels = {
        "this_engine": f"this engine ({eng['page_size']}-token pages, shared prefixes)",
        "paged_no_sharing": f"paged, {eng['page_size']}-token pages, no sharing",
        "contiguous_exact_length": "contiguous, prompt + max_new_tokens",
        "contiguous_max_len": f"contiguous, max length ({mc['max_seq_len']})",
    }
    for key, label in labels.items():
        x = mem["schemes"][key]
        schemes.add_row(label, f"{x['reserved_token_steps']:,}", _pct(x["waste"]),
                        f"{x['vs_this_engine']:.2f}x")
    console.print(schemes)
