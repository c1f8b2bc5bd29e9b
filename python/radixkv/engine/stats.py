"""Counters and per-step memory samples the report is computed from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MemorySample:
    """Token counts at one step, after that step's slots were allocated."""

    running_seqs: int  # sequences holding KV (each branch counts)
    logical_tokens: int  # sum of every running sequence's KV length
    radix_logical: int
    radix_physical: int  # distinct slots those radix sequences read (shared prefixes once)
    radix_pool_used: int  # slots taken in the radix pool (running + cached)
    radix_cached_only: int  # of those, evictable cache not read by any running request
    paged_logical: int
    paged_physical: int  # distinct slots the branches read
    paged_blocks: int  # blocks taken in the paged pool
    paged_blocks_if_copied: int  # blocks if every branch held its own copy of the prompt
    oracle_reserved: int  # contiguous allocator that knows prompt + max_new_tokens
    page16_reserved: int  # every sequence in private 16-token pages (paging without sharing)


@dataclass
class EngineStats:
    steps: int = 0
    idle_steps: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served by the radix cache (radix requests)
    radix_prompt_tokens: int = 0
    prefill_computed: int = 0  # prompt tokens run through the model
    prefill_chunks: int = 0  # extend works (a prompt split over k steps counts k)
    decode_tokens: int = 0  # decode positions run through the model
    generated_tokens: int = 0
    requests_finished: int = 0
    sequences_finished: int = 0
    wall_s: float = 0.0
    forward_s: float = 0.0
    samples: list[MemorySample] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        keys = MemorySample.__dataclass_fields__.keys()
        return {k: int(np.sum([getattr(s, k) for s in self.samples])) for k in keys}

    def peaks(self) -> dict[str, int]:
        keys = MemorySample.__dataclass_fields__.keys()
        return {k: int(max((getattr(s, k) for s in self.samples), default=0)) for k in keys}
