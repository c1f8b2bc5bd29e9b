"""Continuous batching: every step runs all decoding sequences plus as much prefill as the token
budget allows, chunking long prompts, and admits waiting requests in cache-aware order.

Order of work in a step: decodes first (one token each; they must not starve), then the next chunk
of prompts already being prefilled, then new admissions. The waiting queue is sorted by the cached
prefix length the radix tree reports through the read-only ``peek_prefix`` (longest first, then
arrival), as SGLang's longest-prefix-match policy does; a request whose prompt shares much more
with a prompt being prefilled right now than the cache holds yet is deferred a step, so it can
reuse that prefix once published instead of computing it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np

from radixkv.engine.forking import Branch, ForkGroup, ForkManager
from radixkv.engine.prefix import PrefixManager, RadixSeq, common_prefix_len
from radixkv.engine.request import I32, Request

Target = Union[RadixSeq, ForkGroup, Branch]


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_tokens: int = 256  # tokens computed per step (decodes + prefill chunks)
    chunk_size: int = 128  # the most prompt tokens of one request computed in one step
    max_running: int = 64  # sequences admitted at once (branches of a group count once)
    defer_threshold: int = 32  # in-batch prefix sharing: defer if this many more tokens would be shared


@dataclass
class Work:
    """One sequence's share of a step: ``tokens`` at positions ``start..`` written to
    ``write_slots``, attending over ``kv_indices`` (slots, or pages on the paged pool)."""

    target: Target
    kind: Literal["extend", "decode"]
    paged: bool
    tokens: I32
    start: int
    write_slots: I32
    kv_indices: I32
    kv_len: int
    sample: bool  # the last token's logits are needed (decode, or the prompt's final chunk)
    prefix_slots: I32 | None = None  # radix pool: the KV that precedes this work


@dataclass
class StepPlan:
    works: list[Work] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)  # CoW block copies, paged pool

    @property
    def num_tokens(self) -> int:
        return sum(w.tokens.size for w in self.works)


class Scheduler:
    def __init__(self, prefix: PrefixManager, forks: ForkManager, config: SchedulerConfig) -> None:
        self.prefix = prefix
        self.forks = forks
        self.config = config
        self.waiting: list[Request] = []
        self.running: list[RadixSeq | ForkGroup] = []
        self.deferred = 0

    def submit(self, req: Request) -> None:
        if req.params.n == 1:
            self.prefix.check_fits(req)
        else:
            self.forks.check_fits(req)
        self.waiting.append(req)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self, step: int) -> StepPlan:
        plan = StepPlan()
        budget = self.config.max_batch_tokens
        for item in self.running:
            if isinstance(item, RadixSeq) and not item.prefilling:
                plan.works.append(self._radix_decode(item))
                budget -= 1
            elif isinstance(item, ForkGroup) and not item.prefilling:
                for branch in item.branches:
                    if not branch.done:
                        plan.works.append(self._branch_decode(branch, plan))
                        budget -= 1
        for item in self.running:
            if budget <= 0:
                break
            if item.prefilling:
                budget -= self._prefill_chunk(item, budget, plan)
        self._admit(step, budget, plan)
        return plan

    def _admit(self, step: int, budget: int, plan: StepPlan) -> None:
        arrived = [r for r in self.waiting if r.arrival_step <= step]
        hits = {id(r): (self.prefix.hit_length(r) if r.params.n == 1 else 0) for r in arrived}
        arrived.sort(key=lambda r: (-hits[id(r)], r.arrival_step))
        blocked: set[bool] = set()  # pools (keyed by "is parallel") whose head request waits
        for req in arrived:
            if budget <= 0 or len(self.running) >= self.config.max_running:
                return
            forked = req.params.n > 1
            if forked in blocked:
                continue
            if not forked:
                if self._should_defer(req, hits[id(req)]):
                    self.deferred += 1
                    continue
                if not self.prefix.can_admit(req, hits[id(req)]):
                    # The head waits for memory; admitting smaller requests behind it on the same
                    # pool could starve it. The other pool is independent and keeps admitting.
                    blocked.add(forked)
                    continue
                item: RadixSeq | ForkGroup = self.prefix.admit(req)
            else:
                if not self.forks.can_admit(req):
                    blocked.add(forked)
                    continue
                item = self.forks.admit(req)
            self.waiting.remove(req)
            self.running.append(item)
            budget -= self._prefill_chunk(item, budget, plan)

    def _should_defer(self, req: Request, hit: int) -> bool:
        # Only radix prompts being prefilled now will be published to the tree.
        for item in self.running:
            if (isinstance(item, RadixSeq) and item.prefilling
                    and item.req.namespace == req.namespace):
                shared = min(common_prefix_len(req.prompt, item.req.prompt), req.prompt.size - 1)
                if shared - hit >= self.config.defer_threshold:
                    return True
        return False

    def _prefill_chunk(self, item: RadixSeq | ForkGroup, budget: int, plan: StepPlan) -> int:
        n = min(item.prompt_len - item.kv_len, budget, self.config.chunk_size)
        if n <= 0:
            return 0
        start = item.kv_len
        tokens = item.req.prompt[start : start + n]
        last = start + n == item.prompt_len
        if isinstance(item, RadixSeq):
            prefix_slots = item.slots[:start].copy()
            new = self.prefix.alloc(item, n)
            plan.works.append(
                Work(item, "extend", False, tokens, start, new, item.slots.copy(), start + n, last,
                     prefix_slots)
            )
        else:
            new = self.forks.extend_prompt(item, n)
            pages = self.forks.pages(item.parent_id, start + n)
            plan.works.append(Work(item, "extend", True, tokens, start, new, pages, start + n, last))
        return n

    def _radix_decode(self, seq: RadixSeq) -> Work:
        pos = seq.kv_len
        prefix_slots = seq.slots[:pos].copy()
        new = self.prefix.alloc(seq, 1)
        token = np.array([seq.tokens[pos]], dtype=np.int32)
        return Work(seq, "decode", False, token, pos, new, seq.slots.copy(), pos + 1, True,
                    prefix_slots)

    def _branch_decode(self, branch: Branch, plan: StepPlan) -> Work:
        pos = branch.kv_len
        slot, copies = self.forks.append(branch)
        plan.copies.extend(copies)
        token = np.array([branch.tokens[pos]], dtype=np.int32)
        pages = self.forks.pages(branch.seq_id, pos + 1)
        return Work(branch, "decode", True, token, pos, slot, pages, pos + 1, True)

    def retire(self, item: RadixSeq | ForkGroup) -> None:
        self.running.remove(item)
