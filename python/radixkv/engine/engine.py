"""The engine loop: schedule a step, run one forward over every scheduled token, sample, update.

All KV lives in one paged pool (``EngineConfig.page_size``) under the radix cache
(``memory.KVManager``). Each step's metadata is built by the Rust builders and reaches the
device in one copy (``batch``); decode-only steps replay a CUDA graph of their batch-size bucket
on a GPU (``graphs``), and run the same forward eagerly on the CPU. Sampling runs on the device;
only the sampled ids (and, for verification, the sampled rows' logits) come back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

import radixkv as rk
from radixkv.engine.batch import (Staging, build_step, decode_inputs, decode_metadata,
                                  sample_entries, sample_params)
from radixkv.engine.graphs import DecodeGraphs, pack_decode
from radixkv.engine.kv import KVPool, StepAttention, kv_cache_dtype, select_ops
from radixkv.engine.memory import KVManager, ceil_div
from radixkv.engine.request import Completion, Request
from radixkv.engine.sampling import sample_rows
from radixkv.engine.scheduler import Scheduler, SchedulerConfig, StepPlan, Work
from radixkv.engine.seq import Group, Seq
from radixkv.engine.stats import EngineStats, MemorySample, StepTiming


@dataclass(frozen=True)
class EngineConfig:
    pool_tokens: int = 4096  # KV slots (a multiple of page_size), whatever kv_dtype is
    page_size: int = 16
    # The pool's element type: "auto" (the model's dtype), "fp8" / "fp8_e4m3", "fp8_e5m2" (half
    # a 16-bit pool's bytes per token; kv.pool_tokens_for_bytes turns a byte budget into tokens).
    kv_dtype: str = "auto"
    radix: bool = True  # reuse cached prefixes across requests
    eos_token_id: Optional[int] = None
    keep_logits: bool = False  # keep every sampled row's logits (for verification)
    cuda_graphs: Optional[bool] = None  # decode steps replay CUDA graphs; None: on for CUDA
    graph_max_batch: int = 256
    profile: bool = False  # synchronise around each forward to time it on the device
    memory_samples: bool = True  # per-step memory sample (the demo's report)
    scheduler: SchedulerConfig = SchedulerConfig()


class Engine:
    def __init__(self, model: Any, config: EngineConfig = EngineConfig(),
                 ops: Optional[ModuleType] = None) -> None:
        self.model = model
        self.config = config
        self.device = model.device
        # `ops` overrides the choice, e.g. the reference ops on a GPU to compare with the kernels.
        self.ops = ops if ops is not None else select_ops(self.device)
        self.kv_dtype = kv_cache_dtype(config.kv_dtype, model.dtype)  # checked before any work
        self.kv = KVManager(config.pool_tokens, config.page_size, config.radix)
        self.pool = KVPool(model.config, self.kv.num_pages, config.page_size, self.device,
                           self.kv_dtype, getattr(model, "kv_scales", None))
        self.scheduler = Scheduler(self.kv, config.scheduler)
        self.stats = EngineStats()
        self.staging = Staging(self.device)
        self.step_index = 0
        self._finished: list[Completion] = []
        self._copies: list[tuple[Seq, int, int]] = []  # copy-on-write pages for the next step
        self._next_ns = 0
        # Work units paged_decode runs at once here: the decode metadata carries a plan for it.
        mc0 = model.config
        self._plan_slots: Optional[int] = (
            self.ops.decode_slots(mc0.num_q_heads, mc0.num_kv_heads, self.device)
            if self.device.type == "cuda" and hasattr(self.ops, "decode_slots") else None)
        # extend_attention's tile height here: the extend metadata carries a plan built for it.
        self._extend_plan: Optional[tuple[int, int]] = None
        if self.device.type == "cuda" and hasattr(self.ops, "extend_tile_rows"):
            try:
                rows = self.ops.extend_tile_rows(mc0.head_dim)
                self._extend_plan = (mc0.num_q_heads // mc0.num_kv_heads, rows)
            except rk.InvalidArgument:
                pass  # no extend kernel for this head_dim: extend_attention will say so
        use_graphs = config.cuda_graphs if config.cuda_graphs is not None else self.device.type == "cuda"
        self.graphs: Optional[DecodeGraphs] = None
        # On the CPU (or with the reference ops) the graph layouts run eagerly: the same packing
        # and static buffers, no capture.
        if use_graphs:
            mc = model.config
            longest = min(mc.max_seq_len, config.pool_tokens)
            self.graphs = DecodeGraphs(
                model.forward, self.pool, self.ops, mc.num_q_heads, mc.num_kv_heads, mc.head_dim,
                config.graph_max_batch, ceil_div(longest, config.page_size), self.device)

    # -- submission ----------------------------------------------------------------------------

    def check(self, req: Request) -> None:
        """Refuse (``InvalidArgument``) a request longer than the model's context or the pool."""
        p, mc = req.params, self.model.config
        prompt = int(req.prompt.size)
        lo, hi = int(req.prompt.min()), int(req.prompt.max())
        if lo < 0 or hi >= mc.vocab_size:
            bad = lo if lo < 0 else hi
            raise rk.InvalidArgument(
                f"request {req.rid}: token id {bad} outside the model's vocabulary [0, {mc.vocab_size})")
        if prompt + p.max_new_tokens > mc.max_seq_len:
            raise rk.InvalidArgument(
                f"request {req.rid}: prompt {prompt} + max_new_tokens {p.max_new_tokens} exceeds "
                f"the model's context (max_seq_len {mc.max_seq_len})")
        ps, pages = self.kv.page_size, self.kv.num_pages
        last = prompt + p.max_new_tokens - 1  # the last sampled token never gets KV
        worst = prompt // ps + p.n * (ceil_div(last, ps) - prompt // ps)
        cfg = self.config.scheduler
        if cfg.admission == "contiguous":
            length = cfg.contiguous_len or last
            worst = max(worst, ceil_div(length, ps) * p.n)
        else:
            worst = max(worst, ceil_div(int(prompt + cfg.decode_reserve * p.n * p.max_new_tokens), ps))
        if worst > pages:
            raise rk.InvalidArgument(
                f"request {req.rid} (prompt {prompt}, max_new_tokens {p.max_new_tokens}, n {p.n}) "
                f"needs up to {worst} KV pages of {ps} tokens but the pool has {pages} "
                f"({self.kv.num_slots} tokens)")

    def submit(self, req: Request) -> None:
        try:
            self.check(req)
        except rk.InvalidArgument:
            self.stats.refused += 1
            raise
        n = req.params.n
        group = Group(req=req, submit_s=time.perf_counter(), outputs=[[] for _ in range(n)],
                      logits=[[] for _ in range(n)], first_s=[0.0] * n, last_s=[0.0] * n,
                      branches_left=n)
        ns: Any = req.namespace
        if not self.config.radix:
            self._next_ns += 1
            ns = (req.namespace, f"radix-off:{self._next_ns}")  # never shared with another request
        self.scheduler.submit(Seq(group, None if n > 1 else 0, req.prompt.tolist(), ns))

    @property
    def idle(self) -> bool:
        return self.scheduler.idle

    # -- one step ------------------------------------------------------------------------------

    def step(self) -> list[Completion]:
        """Run one engine step; return the requests that finished in it."""
        t0 = time.perf_counter()
        self._finished = []
        plan = self.scheduler.schedule(self.step_index)
        self.step_index += 1
        self.stats.steps += 1
        if plan.preempted:
            gone = {id(s) for s in plan.preempted}
            self._copies = [c for c in self._copies if id(c[0]) not in gone]
        if plan.empty:
            self.stats.idle_steps += 1  # waiting for arrivals (or for nothing at all)
            return []
        copies = [(src, dst) for _, src, dst in self._copies]
        self._copies = []
        prof = self.config.profile and self.device.type == "cuda"
        with torch.inference_mode():
            graph = self._graph_for(plan) if len(copies) <= len(plan.decodes) else None
            if graph is not None:
                logits, entries, temps, lo, hi, any_t, copies_t = self._pack_graph(plan, copies, graph)
            else:
                batch = build_step(plan, copies, self.kv.page_size, self.staging, self._plan_slots,
                                   self._extend_plan)
                entries, copies_t = batch.sample.entries, batch.copies
            if prof:
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            if copies_t is not None:
                self.pool.copy_pages(self.ops, copies_t)
            if graph is not None:
                assert self.graphs is not None
                logits = self.graphs.replay(graph, len(plan.decodes))[: len(plan.decodes)]
                self.stats.graph_steps += 1
            else:
                attend = StepAttention(self.pool, self.ops, batch.extend, batch.decode,
                                       batch.num_extend_rows)
                rows = batch.sample.rows
                logits = self.model.forward(batch.tokens, batch.positions, attend, rows)
                temps, lo, hi, any_t = batch.sample.temps, batch.sample.lo, batch.sample.hi, \
                    batch.sample.any_temperature
            t2 = time.perf_counter()
            gpu = 0.0
            if prof:
                torch.cuda.synchronize()
                gpu = time.perf_counter() - t1
            tokens = sample_rows(logits, temps, lo, hi, any_t).cpu().tolist()
            kept = logits.cpu().numpy() if self.config.keep_logits else None
        t3 = time.perf_counter()
        self._advance(plan, entries, tokens, kept, t3)
        if self.config.memory_samples:
            self._sample_memory()
        t4 = time.perf_counter()
        self.stats.peak_in_use_tokens = max(self.stats.peak_in_use_tokens, self.kv.in_use_tokens())
        kind = "decode" if not plan.extends else ("extend" if not plan.decodes else "mixed")
        self.stats.timings.append(StepTiming(
            kind, len(plan.extends) + len(plan.decodes), plan.num_tokens, graph is not None,
            t1 - t0, t2 - t1, t3 - t2, t4 - t3, gpu,
            prefill_tokens=sum(len(w.tokens) for w in plan.extends),
            attn_units=sum(len(w.tokens) * (w.start + (len(w.tokens) + 1) / 2) for w in plan.extends),
            kv_read=sum(s.kv_len for s in plan.decodes), sampled_rows=len(entries)))
        self.stats.forward_s += t3 - t1
        self.stats.h2d_copies = self.staging.copies
        return self._finished

    def _graph_for(self, plan: StepPlan) -> Any:
        if self.graphs is None or plan.extends or not plan.decodes:
            return None
        pages = sum(s.npages for s in plan.decodes)
        return self.graphs.bucket(len(plan.decodes), pages)

    def _graph_plan(self, lay: Any, seq_lens: np.ndarray) -> Optional[np.ndarray]:
        if self.graphs is None or not lay.plan_capacity:
            return None
        return self.graphs.plan_for(lay, seq_lens)

    def _pack_graph(self, plan: StepPlan, copies: list[tuple[int, int]], graph: Any) -> tuple:
        ps = self.kv.page_size
        seqs = plan.decodes
        tok, pos = decode_inputs(seqs)
        md = decode_metadata(seqs, ps, pos)
        entries = [(s, s.branch) for s in seqs]  # a decode-only step samples each row once
        temps, lo, hi, any_t = sample_params(
            entries, np.fromiter((s.temperature for s in seqs), np.float32, len(seqs)))
        lay = graph.layout
        buf = self.staging.buffer(lay.size)
        n = pack_decode(buf, lay, tok, pos, md.kv_indptr, md.kv_indices, md.seq_lens,
                        md.out_cache_loc, temps, lo, hi, np.asarray(copies, np.int32).reshape(-1),
                        self._graph_plan(lay, md.seq_lens))
        st = self.staging.send(n, graph.static)
        b = len(seqs)
        u32 = 0xFFFFFFFF
        copies_t = st.narrow(0, lay.copies, 2 * len(copies)).view(-1, 2) if copies else None
        return (None, entries, st.narrow(0, lay.temps, b).view(torch.float32),
                st.narrow(0, lay.lo, b).long() & u32, st.narrow(0, lay.hi, b).long() & u32, any_t,
                copies_t)

    # -- after the forward ---------------------------------------------------------------------

    def _advance(self, plan: StepPlan, entries: list[tuple[Seq, int]], tokens: list[int],
                 kept: Optional[np.ndarray], now: float) -> None:
        s = self.stats
        for w in plan.extends:
            seq = w.seq
            seq.kv_len = w.end
            s.prefill_computed += len(w.tokens)
            s.prefill_chunks += 1
            s.recomputed_tokens += max(0, min(w.end, seq.computed) - w.start)
            seq.computed = max(seq.computed, w.end)
            if self.kv.radix:
                self.kv.publish(seq)
        s.decode_tokens += len(plan.decodes)
        k = len(entries) - len(plan.decodes)
        i = 0
        while i < k:
            seq = entries[i][0]
            if seq.branch is None:  # an n > 1 parent's prompt is done: fork it
                n = seq.req.params.n
                self._fork(seq, tokens[i : i + n], kept[i : i + n] if kept is not None else None, now)
                i += n
                continue
            self._token(seq, seq.branch, tokens[i], kept[i] if kept is not None else None, now)
            i += 1
        # Decodes: the per-token work of every running sequence, inlined (the hot loop).
        eos = self.config.eos_token_id
        done: list[Seq] = []
        # (A branch's latest-token time is only read once it finishes: set for those alone.)
        for seq, tok in zip(plan.decodes, tokens[k:]):
            seq.kv_len += 1
            out = seq.out
            out.append(tok)
            seq.tokens.append(tok)
            if len(out) >= seq.max_new or tok == eos:
                done.append(seq)
        s.generated_tokens += len(plan.decodes)
        if kept is not None:
            for seq, row in zip(plan.decodes, kept[k:]):
                seq.group.logits[seq.branch or 0].append(row.copy())
        for seq in done:
            seq.group.last_s[seq.branch or 0] = now
            self.scheduler.retire(seq)
            self._branch_done(seq.group)

    def _fork(self, parent: Seq, toks: list[int], kept: Optional[np.ndarray], now: float) -> None:
        group = parent.group
        prompt = parent.tokens
        children: list[Seq] = []
        for b in range(1, len(toks)):
            self._record(group, b, toks[b], kept[b] if kept is not None else None, now)
            if self._stops(group, b):
                self._branch_done(group)
            else:
                child = Seq(group, b, prompt + [toks[b]], parent.namespace, order=parent.order,
                            preemptions=parent.preemptions, computed=parent.kv_len)
                children.append(child)
        parent.branch = 0
        copies = self.kv.fork(parent, children)
        if copies:  # one per child, in order, when the prompt ends inside a page
            self._copies.extend((c, src, dst) for c, (src, dst) in zip(children, copies))
        if self.config.scheduler.admission == "contiguous" and children:
            share = parent.reserved_pages // group.req.params.n
            for c in children:
                c.reserved_pages = share
            parent.reserved_pages -= share * len(children)
        for c in children:
            self.scheduler.add_running(c)
        self._token(parent, 0, toks[0], kept[0] if kept is not None else None, now)

    def _token(self, seq: Seq, branch: int, token: int, kept: Optional[np.ndarray], now: float) -> None:
        group = seq.group
        self._record(group, branch, token, kept, now)
        seq.tokens.append(token)
        if self._stops(group, branch):
            self.scheduler.retire(seq)
            self._branch_done(group)

    def _record(self, group: Group, branch: int, token: int, kept: Optional[np.ndarray],
                now: float) -> None:
        group.outputs[branch].append(token)
        if not group.first_s[branch]:
            group.first_s[branch] = now
        group.last_s[branch] = now
        self.stats.generated_tokens += 1
        if kept is not None:
            group.logits[branch].append(kept.copy())

    def _stops(self, group: Group, branch: int) -> bool:
        out = group.outputs[branch]
        eos = self.config.eos_token_id
        return len(out) >= group.req.params.max_new_tokens or (eos is not None and out[-1] == eos)

    def _branch_done(self, group: Group) -> None:
        group.branches_left -= 1
        if group.branches_left:
            return
        req = group.req
        s = self.stats
        s.requests_finished += 1
        s.sequences_finished += len(group.outputs)
        s.prompt_tokens += int(req.prompt.size)
        s.cached_tokens += group.cached_len
        first = min(group.first_s)
        gaps = [(last - f) / (len(out) - 1)
                for f, last, out in zip(group.first_s, group.last_s, group.outputs) if len(out) > 1]
        self._finished.append(Completion(
            req, group.outputs, group.cached_len, self.step_index,
            group.logits if self.config.keep_logits else None,
            ttft_s=first - group.submit_s, tpot_s=float(np.mean(gaps)) if gaps else 0.0,
            preemptions=group.preemptions))

    # -- whole runs ----------------------------------------------------------------------------

    def run(self, requests: Iterable[Request],
            on_finish: Optional[Callable[[Completion], Iterable[Request]]] = None,
            on_step: Optional[Callable[[list[Completion]], None]] = None,
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

    # -- memory accounting ---------------------------------------------------------------------

    def _sample_memory(self) -> None:
        running = self.scheduler.running
        ps = self.kv.page_size
        self.stats.samples.append(MemorySample(
            running_seqs=len(running),
            logical_tokens=sum(s.kv_len for s in running),
            logical_page_tokens=sum(int(s.pages.size) for s in running) * ps,
            in_use_tokens=self.kv.in_use_tokens(),
            cached_tokens=int(self.kv.cache.evictable_size),
            contiguous_tokens=sum(int(s.req.prompt.size) + s.req.params.max_new_tokens - 1
                                  for s in running),
        ))
