"""The demo report: one JSON-able dict computed from the engine's counters and memory samples,
and its rendering as rich tables. Every figure is explained in ``FIELD_NOTES``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from radixkv.engine.engine import Engine
from radixkv.engine.verify import VerifyResult


FIELD_NOTES = {
    "requests": "finished requests; sequences counts each parallel-sampling branch",
    "prefix_cache.hit_rate": "prompt tokens whose KV came from the radix cache / prompt tokens "
    "(single-branch requests; the match is capped one token short of the prompt)",
    "prefix_cache.prefill_tokens_saved": "prompt tokens not run through the model thanks to the cache",
    "prefix_cache.evicted_tokens": "cached tokens evicted (LRU leaves) to make room",
    "prefix_cache.deferred_admissions": "admissions put off one step because a prompt being "
    "prefilled shares a long prefix that will be published to the cache",
    "throughput": "generated (sampled) tokens and computed (prefill + decode) tokens per wall "
    "second of the engine loop, verification excluded",
    "memory.reserved_tokens": "KV slots allocated up front: radix pool + paged pool",
    "memory.peak_used_tokens": "most slots taken at once (running requests and cached prefixes)",
    "memory.sharing_factor": "sum of running sequences' KV lengths / distinct KV slots they read",
    "memory.schemes": "KV memory the running requests held, summed over steps (token-steps), "
    "under this engine and three alternatives on the same trace, with the share that holds no KV",
    "parallel.saved_fraction": "1 - blocks held / blocks that copying the prompt per branch "
    "would hold, over the trace",
    "verify": "every sequence recomputed with dense causal attention; each output token "
    "re-derived with the same sampling rule (greedy or seeded Gumbel) must match",
}


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def _scheme(reserved: int, holding: int, ours: int) -> dict[str, float]:
    return {"reserved_token_steps": reserved, "waste": 1.0 - _ratio(holding, reserved),
            "vs_this_engine": _ratio(reserved, ours)}


def build_report(engine: Engine, workload: str, seed: int, ops_backend: str,
                 verify: VerifyResult | None) -> dict[str, Any]:
    s = engine.stats
    cfg = engine.config
    mc = engine.model.config
    bpt = engine.radix_kv.bytes_per_token
    tot = s.totals()
    peak = s.peaks()
    bs = cfg.block_size
    # Token-steps: each step's running KV, summed over the trace (a time integral of memory).
    live = tot["logical_tokens"]
    held = tot["radix_physical"] + tot["paged_blocks"] * bs
    stored = tot["radix_physical"] + tot["paged_physical"]
    max_len_reserved = tot["running_seqs"] * mc.max_seq_len
    pool_tokens = cfg.pool_tokens + cfg.num_blocks * bs
    peak_used = max((x.radix_pool_used + x.paged_blocks * bs for x in s.samples), default=0)
    peak_running = max((x.radix_physical + x.paged_blocks * bs for x in s.samples), default=0)
    peak_saved = max((x.paged_blocks_if_copied - x.paged_blocks for x in s.samples), default=0)
    busy_steps = max(1, s.steps - s.idle_steps)
    return {
        "workload": workload,
        "seed": seed,
        "device": str(engine.device),
        "dtype": str(engine.model.dtype).replace("torch.", ""),
        "ops_backend": ops_backend,
        "model": mc.to_dict(),
        "engine": {
            "pool_tokens": cfg.pool_tokens,
            "num_blocks": cfg.num_blocks,
            "block_size": bs,
            "max_batch_tokens": cfg.scheduler.max_batch_tokens,
            "chunk_size": cfg.scheduler.chunk_size,
            "eos_token_id": cfg.eos_token_id,
        },
        "requests": {
            "requests": s.requests_finished,
            "sequences": s.sequences_finished,
            "prompt_tokens": s.prompt_tokens,
            "generated_tokens": s.generated_tokens,
            "steps": s.steps,
            "mean_batch_tokens": _ratio(s.prefill_computed + s.decode_tokens, busy_steps),
        },
        "prefix_cache": {
            "prompt_tokens": s.radix_prompt_tokens,
            "cached_tokens": s.cached_tokens,
            "hit_rate": _ratio(s.cached_tokens, s.radix_prompt_tokens),
            "prefill_tokens_computed": s.prefill_computed,
            "prefill_tokens_saved": s.cached_tokens,
            "prefill_chunks": s.prefill_chunks,
            "evicted_tokens": engine.prefix.evicted_tokens,
            "duplicate_slots_freed": engine.prefix.duplicate_slots_freed,
            "deferred_admissions": engine.scheduler.deferred,
        },
        "throughput": {
            "wall_s": s.wall_s,
            "forward_s": s.forward_s,
            "generated_tokens_per_s": _ratio(s.generated_tokens, s.wall_s),
            "computed_tokens_per_s": _ratio(s.prefill_computed + s.decode_tokens, s.wall_s),
        },
        "memory": {
            "kv_bytes_per_token": bpt,
            "reserved_tokens": pool_tokens,
            "reserved_bytes": pool_tokens * bpt,
            "peak_used_tokens": peak_used,
            "peak_used_bytes": peak_used * bpt,
            "peak_running_kv_tokens": peak_running,
            "peak_logical_kv_tokens": peak["logical_tokens"],
            "sharing_factor": _ratio(live, stored),
            # KV memory reserved over the trace (token-steps) by each allocation scheme for the
            # same running sequences, and the share of it that holds no KV.
            "schemes": {
                "this_engine": _scheme(held, stored, held),
                "paged_16_no_sharing": _scheme(tot["page16_reserved"], live, held),
                "contiguous_exact_length": _scheme(tot["oracle_reserved"], live, held),
                "contiguous_max_len": _scheme(max_len_reserved, live, held),
            },
        },
        "parallel": {
            "forks": engine.forks.forks,
            "cow_block_copies": engine.forks.cow_copies,
            "peak_blocks": peak["paged_blocks"],
            "peak_blocks_if_copied": peak["paged_blocks_if_copied"],
            "block_steps": tot["paged_blocks"],
            "block_steps_if_copied": tot["paged_blocks_if_copied"],
            "saved_fraction": 1.0 - _ratio(tot["paged_blocks"], tot["paged_blocks_if_copied"]),
            "peak_saved_bytes": peak_saved * bs * bpt,
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
    table.add_row("throughput", f"{th['generated_tokens_per_s']:.0f} generated tokens/s, "
                  f"{th['computed_tokens_per_s']:.0f} computed tokens/s "
                  f"({th['wall_s']:.2f} s, {th['forward_s']:.2f} s in forward)")
    table.add_row("KV memory", f"peak {mem['peak_used_tokens']} of {mem['reserved_tokens']} "
                  f"slots used ({_mib(mem['peak_used_bytes'])} of {_mib(mem['reserved_bytes'])}); "
                  f"running requests peak {mem['peak_running_kv_tokens']} slots")
    table.add_row("prefix sharing", f"{mem['sharing_factor']:.2f} logical KV tokens per stored token")
    table.add_row("parallel sampling", f"{par['forks']} forks, {par['cow_block_copies']} "
                  f"copy-on-write block copies; {par['block_steps']:,} block-steps held vs "
                  f"{par['block_steps_if_copied']:,} if each branch copied the prompt "
                  f"(saved {_pct(par['saved_fraction'])}, peak {_mib(par['peak_saved_bytes'])})")
    if ver is None:
        table.add_row("verify", "skipped (--no-verify)")
    else:
        if ver["ok"]:
            verdict = "[green]PASS[/green]"
        elif report["dtype"] == "float32":
            verdict = "[red]FAIL[/red]"
        else:  # kernels and the dense path round differently in 16-bit; a token may flip
            verdict = f"[yellow]{report['dtype']}: not exact[/yellow]"
        diff = ver["max_abs_logit_diff"]
        table.add_row("verify", f"{verdict}: {ver['tokens'] - ver['mismatched_tokens']}/"
                      f"{ver['tokens']} tokens of {ver['sequences']} sequences match dense "
                      f"recomputation" + (f"; max |logit diff| {diff:.2e}" if diff is not None else ""))
        for line in ver["first_mismatches"]:
            table.add_row("", f"[red]{line}[/red]")
    console.print(table)
    schemes = Table(title="KV memory reserved for the running requests over the trace",
                    title_justify="left")
    for col in ("allocation scheme", "token-steps", "holding no KV", "vs this engine"):
        schemes.add_column(col, justify="left" if col == "allocation scheme" else "right")
    labels = {
        "this_engine": "this engine (radix slots + forked 16-pages)",
        "paged_16_no_sharing": "paged, 16-token pages, no sharing",
        "contiguous_exact_length": "contiguous, prompt + max_new_tokens",
        "contiguous_max_len": f"contiguous, max length ({mc['max_seq_len']})",
    }
    for key, label in labels.items():
        x = mem["schemes"][key]
        schemes.add_row(label, f"{x['reserved_token_steps']:,}", _pct(x["waste"]),
                        f"{x['vs_this_engine']:.2f}x")
    console.print(schemes)
