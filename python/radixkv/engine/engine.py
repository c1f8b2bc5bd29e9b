"""The engine loop: schedule a step, run one forward over every scheduled token, sample, update.

Two KV pools live side by side: a page-1 pool under the radix prefix cache for ordinary requests,
and a paged pool (``block_size`` tokens a page) under ``BlockAllocator`` for parallel sampling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Iterable

import numpy as np
import torch

import radixkv as rk

from radixkv.engine.batch import build_batch
from radixkv.engine.forking import Branch, ForkGroup, ForkManager
from radixkv.engine.kv import KVPool, StepAttention, select_ops
from radixkv.engine.model import TinyLlama
from radixkv.engine.prefix import PrefixManager, RadixSeq
from radixkv.engine.request import Completion, Request
from radixkv.engine.sampling import sample
from radixkv.engine.scheduler import Scheduler, SchedulerConfig, StepPlan, Work
from radixkv.engine.stats import EngineStats, MemorySample


@dataclass(frozen=True)
class EngineConfig:
    pool_tokens: int = 4096  # radix pool slots (page size 1)
    num_blocks: int = 128  # paged pool for parallel sampling
    block_size: int = 16
    eos_token_id: int | None = None
    keep_logits: bool = False  # keep every sampled row's logits (for verification)
    scheduler: SchedulerConfig = SchedulerConfig()


class Engine:
    def __init__(self, model: TinyLlama, config: EngineConfig = EngineConfig(),
                 ops: ModuleType | None = None) -> None:
        self.model = model
        self.config = config
        self.device = model.device
        # `ops` overrides the choice, e.g. the reference ops on a GPU to compare with the kernels.
        self.ops = ops if ops is not None else select_ops(self.device)
        self.radix_kv = KVPool(model.config, config.pool_tokens, 1, self.device, model.dtype)
        self.paged_kv = KVPool(model.config, config.num_blocks, config.block_size, self.device,
                               model.dtype)
        self.prefix = PrefixManager(config.pool_tokens)
        self.forks = ForkManager(config.num_blocks, config.block_size)
        self.scheduler = Scheduler(self.prefix, self.forks, config.scheduler)
        self.stats = EngineStats()
        self.step_index = 0
        self._finished: list[Completion] = []

    def submit(self, req: Request) -> None:
        if req.prompt.size + req.params.max_new_tokens > self.model.config.max_seq_len:
            raise rk.InvalidArgument(
                f"request {req.rid}: prompt {req.prompt.size} + max_new_tokens "
                f"{req.params.max_new_tokens} exceeds the model's max_seq_len "
                f"{self.model.config.max_seq_len}"
            )
        self.scheduler.submit(req)

    @property
    def idle(self) -> bool:
        return self.scheduler.idle

    def step(self) -> list[Completion]:
        """Run one engine step; return the requests that finished in it."""
        self._finished = []
        plan = self.scheduler.schedule(self.step_index)
        self.step_index += 1
        self.stats.steps += 1
        if not plan.works:
            self.stats.idle_steps += 1  # waiting for arrivals (or for nothing at all)
            return []
        self._sample_memory(plan)
        t0 = time.perf_counter()
        with torch.inference_mode():
            if plan.copies:
                pairs = torch.tensor(plan.copies, dtype=torch.int32, device=self.device)
                self.paged_kv.copy_blocks(self.ops, pairs)
            batch = build_batch(plan, self.radix_kv, self.paged_kv, self.forks.blocks, self.device)
            attend = StepAttention(batch.segments, self.ops)
            logits = self.model.forward(batch.tokens, batch.positions, attend, batch.logits_rows)
            logits = logits.cpu()
        self.stats.forward_s += time.perf_counter() - t0
        rows = {id(w): i for i, w in enumerate(batch.sample_works)}
        for work in plan.works:
            self._advance(work, logits[rows[id(work)]] if id(work) in rows else None)
        return self._finished

    def run(self, requests: Iterable[Request],
            on_finish: Callable[[Completion], Iterable[Request]] | None = None,
            on_step: Callable[[list[Completion]], None] | None = None,
            max_steps: int = 1_000_000) -> list[Completion]:
        """Submit ``requests``, step until everything (including follow-ups that ``on_finish``
        returns, e.g. the next chat turn) has finished. ``on_step`` sees each step's finishers."""
        for req in requests:
            self.submit(req)
        done: list[Completion] = []
        t0 = time.perf_counter()
        while not self.idle:
            if self.step_index >= max_steps:
                raise RuntimeError(f"engine did not drain in {max_steps} steps")
            finished = self.step()
            if on_step is not None:
                on_step(finished)
            for comp in finished:
                done.append(comp)
                for follow in on_finish(comp) if on_finish else ():
                    self.submit(follow)
        self.stats.wall_s += time.perf_counter() - t0
        return done

    # -- after the forward ---------------------------------------------------------------

    def _advance(self, work: Work, logits: torch.Tensor | None) -> None:
        t = work.target
        if isinstance(t, RadixSeq):
            self._advance_radix(t, work, logits)
        elif isinstance(t, ForkGroup):
            self._advance_group(t, work, logits)
        else:
            self._advance_branch(t, logits)

    def _advance_radix(self, seq: RadixSeq, work: Work, logits: torch.Tensor | None) -> None:
        seq.kv_len = work.kv_len
        if work.kind == "extend":
            self.stats.prefill_computed += work.tokens.size
            self.stats.prefill_chunks += 1
            self.prefix.publish(seq)
        else:
            self.stats.decode_tokens += 1
        if logits is None:
            return
        p = seq.req.params
        token = sample(logits, p.temperature, p.seed, 0, len(seq.output))
        self._record(seq.output, seq.logits, token, logits)
        seq.tokens.append(token)
        if self._stops(seq.output, p.max_new_tokens):
            self.prefix.finish(seq)
            self.scheduler.retire(seq)
            self._complete(seq.req, [seq.output], seq.cached_len, [seq.logits])

    def _advance_group(self, group: ForkGroup, work: Work, logits: torch.Tensor | None) -> None:
        group.kv_len = work.kv_len
        self.stats.prefill_computed += work.tokens.size
        self.stats.prefill_chunks += 1
        if logits is None:
            return
        self.forks.fork(group)
        for branch in group.branches:
            self._branch_token(branch, logits)

    def _advance_branch(self, branch: Branch, logits: torch.Tensor | None) -> None:
        branch.kv_len += 1
        self.stats.decode_tokens += 1
        assert logits is not None
        self._branch_token(branch, logits)

    def _branch_token(self, branch: Branch, logits: torch.Tensor) -> None:
        p = branch.group.req.params
        token = sample(logits, p.temperature, p.seed, branch.index, len(branch.output))
        self._record(branch.output, branch.logits, token, logits)
        branch.tokens.append(token)
        if self._stops(branch.output, p.max_new_tokens):
            self.forks.release(branch)
            group = branch.group
            if all(b.done for b in group.branches):
                self.scheduler.retire(group)
                self._complete(group.req, [b.output for b in group.branches], 0,
                               [b.logits for b in group.branches])

    def _record(self, output: list[int], kept: list[np.ndarray], token: int,
                logits: torch.Tensor) -> None:
        output.append(token)
        self.stats.generated_tokens += 1
        if self.config.keep_logits:
            kept.append(logits.numpy().copy())

    def _stops(self, output: list[int], max_new: int) -> bool:
        eos = self.config.eos_token_id
        return len(output) >= max_new or (eos is not None and output[-1] == eos)

    def _complete(self, req: Request, outputs: list[list[int]], cached: int,
                  logits: list[list[np.ndarray]]) -> None:
        self.stats.requests_finished += 1
        self.stats.sequences_finished += len(outputs)
        self.stats.prompt_tokens += int(req.prompt.size)
        if req.params.n == 1:
            self.stats.radix_prompt_tokens += int(req.prompt.size)
            self.stats.cached_tokens += cached
        self._finished.append(Completion(req, outputs, cached, self.step_index,
                                         logits if self.config.keep_logits else None))

    # -- memory accounting -----------------------------------------------------------------

    def _sample_memory(self, plan: StepPlan) -> None:
        """After this step's allocations: what running sequences hold, logically and physically."""
        radix_slots, paged_slots = [], []
        radix_logical = paged_logical = oracle = page16 = if_copied = seqs = 0
        bs = self.forks.block_size
        for item in self.scheduler.running:
            worst = int(item.req.prompt.size) + item.req.params.max_new_tokens - 1
            if isinstance(item, RadixSeq):
                n = int(item.slots.size)  # kv_len plus this step's new slots
                radix_slots.append(item.slots)
                radix_logical += n
                page16 += -(-n // 16) * 16
                oracle += worst
                seqs += 1
            else:
                live = [b for b in item.branches if not b.done] or None
                lens = [w.kv_len for w in plan.works if w.target is item]
                if live is None:  # still prefilling: the parent alone
                    n = lens[0] if lens else item.kv_len
                    ids = [(item.parent_id, n)]
                else:
                    ids = [(b.seq_id, b.kv_len + 1) for b in live]
                for seq_id, n in ids:
                    if n:
                        paged_slots.append(np.asarray(self.forks.blocks.slot_mapping(seq_id, 0, n)))
                    paged_logical += n
                    if_copied += -(-n // bs)
                    page16 += -(-n // 16) * 16
                    oracle += worst
                    seqs += 1

        def distinct(parts: list[np.ndarray]) -> int:
            return int(np.unique(np.concatenate(parts)).size) if parts else 0

        pool_used = self.prefix.num_slots - int(self.prefix.pool.available)
        self.stats.samples.append(MemorySample(
            running_seqs=seqs,
            logical_tokens=radix_logical + paged_logical,
            radix_logical=radix_logical,
            radix_physical=distinct(radix_slots),
            radix_pool_used=pool_used,
            radix_cached_only=int(self.prefix.cache.evictable_size),
            paged_logical=paged_logical,
            paged_physical=distinct(paged_slots),
            paged_blocks=self.forks.blocks_in_use(),
            paged_blocks_if_copied=if_copied,
            oracle_reserved=oracle,
            page16_reserved=page16,
        ))
