"""Continuous batching over one paged KV pool: decodes first, then prefill chunks, then admissions.

Every step runs all decoding sequences (one token each), then the next chunk of prompts being
prefilled, then admits waiting sequences while the token budget lasts. KV is allocated as
positions need it, never reserved for a request's worst case (``admission="paged"``): a request
is admitted when the pool (free pages plus evictable cache) holds, in whole pages per sequence,
what every running sequence (itself included) may still allocate: the rest of its prompt plus a
fraction (the *reserve ratio*) of the tokens it may still generate; at ratio 1 that is exact, so
without end-of-sequence tokens nothing is preempted. The ratio adapts, as SGLang's new-token ratio does: it starts at
``decode_reserve_init``, decays by ``decode_reserve_decay`` per step down to ``decode_reserve``,
and jumps to 1 (every running sequence's whole remaining length) whenever a sequence is
preempted, so a pool that turned out too small stops admitting until the running set has room to
finish. When a step cannot get the pages it needs after all, the newest running sequences are
preempted (recompute): their KV goes to the radix cache unlocked, and they wait at the head of
the queue with the tokens generated so far, so re-admission recomputes only what eviction took.

``admission="contiguous"`` is the pre-paging baseline for comparisons: each sequence reserves
``prompt + max_new_tokens`` tokens (or ``contiguous_len``) up front and is admitted only if the
whole reservation fits the pool; it never needs preemption.

Waiting sequences are ordered preempted first, then by the cached prefix length the radix tree
reports through the read-only ``peek_prefix`` (longest first, then arrival), as SGLang's
longest-prefix-match policy does; a request whose prompt shares much more with a prompt being
prefilled right now than the cache holds yet is deferred a step, so it can reuse that prefix
once published instead of computing it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import numpy as np

import radixkv as rk
from radixkv.engine.memory import KVManager, ceil_div
from radixkv.engine.seq import Seq


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_tokens: int = 256  # tokens computed per step (decodes + prefill chunks)
    chunk_size: int = 128  # the most prompt tokens of one sequence computed in one step
    max_running: int = 64  # sequences running at once (each branch of n > 1 counts)
    defer_threshold: int = 32  # in-batch prefix sharing: defer if this many more tokens would be shared
    admission: Literal["paged", "contiguous"] = "paged"
    decode_reserve: float = 0.25  # paged: the floor of the reserve ratio (see the module doc)
    decode_reserve_init: float = 0.7  # paged: the ratio at start (raised to the floor if below)
    decode_reserve_decay: float = 0.001  # paged: per step, back towards the floor after a preemption
    contiguous_len: Optional[int] = None  # contiguous: tokens reserved per sequence (None: its own)

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1 or self.chunk_size < 1 or self.max_running < 1:
            raise rk.InvalidArgument(
                "max_batch_tokens, chunk_size and max_running must be >= 1, got "
                f"{self.max_batch_tokens}, {self.chunk_size}, {self.max_running}"
            )
        if self.admission not in ("paged", "contiguous"):
            raise rk.InvalidArgument(f"admission must be 'paged' or 'contiguous', got {self.admission!r}")
        for name in ("decode_reserve", "decode_reserve_init", "decode_reserve_decay"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise rk.InvalidArgument(f"{name} must be in [0, 1], got {value}")


@dataclass
class Work:
    """One sequence's share of a step: ``tokens`` at positions ``start..start + len``."""

    seq: Seq
    start: int
    tokens: list[int]
    sample: bool  # the last token's logits are needed (decode, or the final prefill chunk)

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


@dataclass
class StepPlan:
    extends: list[Work] = field(default_factory=list)
    decodes: list[Seq] = field(default_factory=list)  # one token each: tokens[kv_len] at kv_len
    preempted: list[Seq] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.extends and not self.decodes

    @property
    def num_tokens(self) -> int:
        return sum(len(w.tokens) for w in self.extends) + len(self.decodes)


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class Scheduler:
    def __init__(self, kv: KVManager, config: SchedulerConfig) -> None:
        self.kv = kv
        self.config = config
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.reserved_pages = 0  # contiguous admission
        self.deferred = 0
        self.preemptions = 0
        self._order = 0
        # Paged admission's reserve ratio (module doc); its peak is kept for reports.
        self.reserve = max(config.decode_reserve, config.decode_reserve_init)

    # -- queue ---------------------------------------------------------------------------------

    def reservation(self, seq: Seq) -> int:
        """Pages a sequence (all ``n`` branches of an unforked parent) reserves in contiguous mode."""
        p = seq.req.params
        length = self.config.contiguous_len or (int(seq.req.prompt.size) + p.max_new_tokens - 1)
        return ceil_div(length, self.kv.page_size) * (p.n if seq.branch is None else 1)

    def submit(self, seq: Seq) -> None:
        self.waiting.append(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # -- one step ------------------------------------------------------------------------------

    def schedule(self, step: int) -> StepPlan:
        plan = StepPlan()
        cfg = self.config
        self.reserve = max(cfg.decode_reserve, self.reserve - cfg.decode_reserve_decay)
        while True:
            self._decodes(plan)
            budget = self.config.max_batch_tokens - len(plan.decodes)
            if len(plan.decodes) < len(self.running):  # some are prefilling
                for seq in self.running:
                    if budget <= 0:
                        break
                    if seq.prefilling:
                        budget -= self._chunk(seq, budget, plan)
            self._admit(step, budget, plan)
            if not plan.empty or not self.running:
                return plan
            # Running sequences hold the pool but none can advance: free the newest and retry.
            self._preempt(max(self.running, key=lambda s: s.order), plan)

    def _decodes(self, plan: StepPlan) -> None:
        kv = self.kv
        ps = kv.page_size
        while True:
            # One pass per step over every running sequence: keep it lean (256 at a time).
            decoding = [s for s in self.running if s.kv_len >= s.target]
            needy = [s for s in decoding if s.npages * ps <= s.kv_len]
            if len(needy) <= kv.free_pages() or not decoding:
                break
            self._preempt(max(self.running, key=lambda s: s.order), plan)
        if needy:
            pages = kv.alloc_pages(len(needy))
            for i, seq in enumerate(needy):
                seq.add_pages(pages[i : i + 1])
        plan.decodes = decoding

    def _chunk(self, seq: Seq, budget: int, plan: StepPlan) -> int:
        kv = self.kv
        n = min(seq.target - seq.kv_len, budget, self.config.chunk_size)
        final = seq.kv_len + n == seq.target
        forks = (seq.req.params.n - 1 if seq.branch is None and seq.target % kv.page_size else 0)
        free = kv.free_pages()
        if kv.pages_for(seq, seq.kv_len + n) + (forks if final else 0) > free:
            # Take what fits now; the rest of the prompt waits for pages.
            n = min(n, (int(seq.pages.size) + free) * kv.page_size - seq.kv_len)
            final = seq.kv_len + n == seq.target
            if final and kv.pages_for(seq, seq.kv_len + n) + forks > free:
                n -= 1
                final = False
            if n <= 0:
                return 0
        kv.alloc(seq, seq.kv_len + n)
        if final and seq.branch is None:
            kv.reserve_fork_pages(seq)
        plan.extends.append(Work(seq, seq.kv_len, seq.tokens[seq.kv_len : seq.kv_len + n], final))
        return n

    # -- admission -----------------------------------------------------------------------------

    def _admit(self, step: int, budget: int, plan: StepPlan) -> None:
        cfg, kv = self.config, self.kv
        if not self.waiting or budget <= 0 or len(self.running) >= cfg.max_running:
            return
        reserve = self.reserve
        committed = 0
        if cfg.admission == "paged":
            # Pages the running sequences still need: the rest of each prompt plus the reserve
            # share of its remaining tokens, in whole pages, beyond the pages it holds (this
            # step's allocations included). When they leave no page free, nothing can be
            # admitted: skip the queue's prefix lookups.
            committed = sum(self._still_needs(s, reserve) for s in self.running)
            if committed + 1 > kv.free_pages():
                return
        arrived = [s for s in self.waiting if s.req.arrival_step <= step]
        if not arrived:
            return
        if cfg.admission == "contiguous" and (
                self.reserved_pages + min(self.reservation(s) for s in arrived) > kv.num_pages):
            return  # not even the smallest reservation fits: skip the prefix lookups
        hits = {id(s): kv.peek(s) for s in arrived}
        arrived.sort(key=lambda s: (s.preemptions == 0, -hits[id(s)], s.req.arrival_step, s.order))
        for seq in arrived:
            if budget <= 0 or len(self.running) >= cfg.max_running:
                return
            hit = hits[id(seq)]
            if seq.preemptions == 0 and kv.radix and self._should_defer(seq, hit):
                self.deferred += 1
                continue
            if cfg.admission == "contiguous":
                need = self.reservation(seq)
                if self.reserved_pages + need > kv.num_pages:
                    return  # the head waits; admitting smaller ones behind it could starve it
            else:
                # Its whole length counts, the hit too: locking the hit takes its pages out of
                # the evictable cache (an overestimate when others hold them locked already).
                if committed + self._still_needs(seq, reserve) > kv.free_pages():
                    return
            self.waiting.remove(seq)
            got = kv.admit(seq)
            if seq.preemptions == 0:  # first admission (a forked branch is never waiting fresh)
                seq.group.cached_len = got
            self._order += 1
            seq.order = self._order
            if cfg.admission == "contiguous":
                seq.reserved_pages = self.reservation(seq)
                self.reserved_pages += seq.reserved_pages
            self.running.append(seq)
            n = self._chunk(seq, budget, plan)
            budget -= n
            if cfg.admission == "paged":
                committed += self._still_needs(seq, reserve)

    def _still_needs(self, seq: Seq, reserve: float) -> int:
        """Pages ``seq`` may still allocate: its prompt (all its tokens while waiting) plus
        ``reserve`` of the tokens it may still sample, beyond the pages it holds."""
        end = max(seq.kv_len, seq.target, len(seq.tokens) if seq.node is None else 0)
        return max(0, ceil_div(int(end + reserve * seq.remaining_new), self.kv.page_size) - seq.npages)

    def _should_defer(self, seq: Seq, hit: int) -> bool:
        prompt = seq.req.prompt
        for other in self.running:
            if other.prefilling and other.namespace == seq.namespace:
                shared = min(common_prefix_len(prompt, other.req.prompt), prompt.size - 1)
                if shared - hit >= self.config.defer_threshold:
                    return True
        return False

    # -- leaving -------------------------------------------------------------------------------

    def _preempt(self, seq: Seq, plan: StepPlan) -> None:
        """Recompute preemption: drop ``seq``'s work from this step, cache its KV, requeue it."""
        plan.extends = [w for w in plan.extends if w.seq is not seq]
        plan.decodes = [s for s in plan.decodes if s is not seq]
        self.retire(seq)
        seq.preemptions += 1
        seq.group.preemptions += 1
        self.preemptions += 1
        # The estimate was too low: admit nothing more until the running set can finish.
        self.reserve = 1.0
        plan.preempted.append(seq)
        self.waiting.insert(0, seq)

    def add_running(self, seq: Seq) -> None:
        """A forked branch joins the running set (its parent's admission order)."""
        self.running.append(seq)

    def retire(self, seq: Seq) -> None:
        """``seq`` finished (or is preempted): release its KV and reservation."""
        self.running.remove(seq)
        self.kv.release(seq)
        self.reserved_pages -= seq.reserved_pages
        seq.reserved_pages = 0
