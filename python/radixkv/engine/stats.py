"""Counters, per-step timings and memory samples the reports are computed from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MemorySample:
    """One step, after its pages were allocated (token counts)."""

    running_seqs: int  # sequences holding KV (each branch counts)
    logical_tokens: int  # sum of every running sequence's KV length
    logical_page_tokens: int  # sum of the pages each running sequence maps (x page size)
    in_use_tokens: int  # slots held for running sequences (shared pages once)
    cached_tokens: int  # evictable cache: no running sequence holds it
    contiguous_tokens: int  # reservation of prompt + max_new_tokens per running sequence


@dataclass
class StepTiming:
    """Host time of one step (seconds). ``host_pre``: step start to the forward launch
    (scheduling, metadata, packing, the copy issued); ``launch``: the forward's own Python and
    launches (or a graph replay); ``wait``: until the sampled tokens reached the host (the GPU
    finishing); ``host_post``: bookkeeping after that. ``gpu``: the forward's device time, only
    in profiling mode (synchronised on both sides), else 0."""

    kind: str  # "decode" (graph or eager decode-only), "mixed", "extend"
    batch: int  # sequences in the step
    tokens: int
    graph: bool
    host_pre: float
    launch: float
    wait: float
    host_post: float
    gpu: float = 0.0
    prefill_tokens: int = 0
    attn_units: float = 0.0  # sum over prefill chunks of E * (P + (E + 1) / 2): causal pairs
    kv_read: int = 0  # KV tokens the decode rows read
    sampled_rows: int = 0

    @property
    def total(self) -> float:
        return self.host_pre + self.launch + self.wait + self.host_post

    @property
    def host_outside_forward(self) -> float:
        return self.host_pre + self.host_post


@dataclass
class EngineStats:
    steps: int = 0
    idle_steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served by the radix cache at first admission
    prefill_computed: int = 0  # tokens run through the model as prefill (recompute included)
    recomputed_tokens: int = 0  # of those, positions a preempted sequence had computed before
    prefill_chunks: int = 0
    decode_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    sequences_finished: int = 0
    refused: int = 0
    graph_steps: int = 0
    h2d_copies: int = 0
    peak_in_use_tokens: int = 0
    wall_s: float = 0.0
    forward_s: float = 0.0  # launch + wait over all steps
    samples: list[MemorySample] = field(default_factory=list)
    timings: list[StepTiming] = field(default_factory=list)

    def peaks(self) -> dict[str, int]:
        keys = MemorySample.__dataclass_fields__.keys()
        return {k: int(max((getattr(s, k) for s in self.samples), default=0)) for k in keys}

    def totals(self) -> dict[str, int]:
        keys = MemorySample.__dataclass_fields__.keys()
        return {k: int(np.sum([getattr(s, k) for s in self.samples])) for k in keys}
