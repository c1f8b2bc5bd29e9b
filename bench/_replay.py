"""Replay a serving trace through radixkv with the anchors' scheduler protocol.

The protocol is the one the benchmark kit's ``bench/cache_anchor_bench.py`` documents and
drives SGLang with, so the per-request µs compare like for like:

- requests are admitted in trace order, at most ``max_running`` in flight; before a
  new admission the oldest running request finishes; if admission cannot allocate
  even after eviction, the oldest running request finishes and admission is retried;
- admission: match the prompt capped one token short (the last prompt token is
  always recomputed, so its logits exist), lock the matched node, evict if the pool
  is short, allocate the prompt remainder plus the decode slots (``output_len - 1``:
  the last sampled token never gets KV), write the request's row, then checkpoint
  the prompt (insert, free duplicates, move the lock). radixkv's ``alloc`` evicts
  ``need - available`` tokens itself when the pool is short, the same call SGLang's
  scheduler makes with ``evict`` before its ``alloc``; when even that cannot be
  enough, ``alloc`` changes nothing and the driver evicts everything evictable, as
  SGLang does before its allocation fails;
- finish: checkpoint prompt + output[:-1], free what the tree does not hold, unlock.

A checkpoint inserts the row's tokens, frees the row's own slots for the span that
another request inserted meanwhile (and copies the tree's slots for that span into the
row), and moves the lock onto the node of the inserted path (``move_lock``: the lock
of the new end, then the unlock of the old one, in one call). SGLang re-matches after the
insert to learn that node; radixkv's ``insert_node`` returns it (the tree ends up the
same: the path is touched and the node it ends inside is split, as a match would).

SGLang's scheduler also inserts the bare prompt at finish, splitting the leaf at the
prompt boundary for its priority bookkeeping; the anchor driver copies that, but it is
no part of the documented protocol and radixkv has no priorities, so it is off by
default (``split_prompt=True`` adds it; hit rates and evictions are the same either
way on all four traces).

Timed, as in the anchor: admission (with retries) plus finish, per request. Building
the token arrays is not timed (the anchor builds its ``array('q')`` keys untimed too).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np


@dataclass
class _Req:
    full: np.ndarray          # prompt + output, int32
    plen: int
    olen: int
    row: int = -1
    rowv: Any = None          # view of that row of the slot table
    node: Any = None          # the locked path end
    protected: int = 0        # leading row slots that the tree owns
    prefix_len: int = 0


@dataclass
class ReplayResult:
    trace: str
    requests: int
    per_req_us: List[float] = field(repr=False, default_factory=list)
    wall_s: float = 0.0
    matched_tokens: int = 0
    prompt_tokens: int = 0
    evicted_tokens: int = 0
    admission_retries: int = 0
    capacity_tokens: int = 0
    tree_tokens_end: int = 0
    free_slots_end: int = 0

    def summary(self) -> Dict[str, Any]:
        us = sorted(self.per_req_us)
        p99 = us[max(0, math.ceil(0.99 * len(us)) - 1)]
        return {
            "system": "radixkv",
            "trace": self.trace,
            "requests": self.requests,
            "wall_s": self.wall_s,
            "cache_s": sum(us) / 1e6,
            "mean_us": statistics.fmean(us),
            "p50_us": us[len(us) // 2],
            "p99_us": p99,
            "max_us": us[-1],
            "hit_rate": self.matched_tokens / self.prompt_tokens,
            "matched_tokens": self.matched_tokens,
            "prompt_tokens": self.prompt_tokens,
            "evicted_tokens": self.evicted_tokens,
            "admission_retries": self.admission_retries,
            "capacity_tokens": self.capacity_tokens,
            "tree_tokens_end": self.tree_tokens_end,
            "free_slots_end": self.free_slots_end,
        }


class RadixkvDriver:
    """One pool, one cache, and a request-to-slots table like SGLang's ReqToTokenPool."""

    def __init__(self, rk: Any, capacity: int, max_running: int, max_context: int,
                 split_prompt: bool = False, events: bool = False):
        self.rk = rk
        self.pool = rk.TokenPool(capacity)
        # with events on, each admission and finish also drains the cache's KV events (as a
        # scheduler publishing them to a router would), inside the timed span
        self.cache = rk.RadixCache(self.pool, events=events)
        self.events = events
        self.num_events = 0
        # the scheduler's per-request slot rows (the attention kernels read them)
        self.rows = np.zeros((max_running + 2, max_context), dtype=np.int32)
        self.free_rows = list(range(max_running + 2))
        self.split_prompt = split_prompt
        self.matched = 0

    def prepare(self, r: Any) -> _Req:
        full = np.asarray(r.prompt + r.output, dtype=np.int32)
        return _Req(full, len(r.prompt), r.output_len)

    # -- timed -------------------------------------------------------------
    def admit(self, st: _Req) -> bool:
        cache, plen = self.cache, st.plen
        row_id = self.free_rows.pop()
        row = self.rows[row_id]
        # the matched slots are written straight into the request's row
        m = cache.match_prefix(st.full[: plen - 1], out=row)
        pl = m.length
        node = m.node
        cache.lock(node)
        need = plen - pl + st.olen - 1
        try:
            # evicts exactly what SGLang's evict(need - available) would, when short; the
            # new slots are written straight into the row
            cache.alloc(need, out=row[pl: pl + need])
        except self.rk.OutOfSlots:
            # alloc evicted nothing; SGLang evicts all it can before failing: so do we
            cache.evict(need - self.pool.available)
            cache.unlock(node)
            self.free_rows.append(row_id)
            return False
        st.row, st.rowv, st.node, st.protected, st.prefix_len = row_id, row, node, pl, pl
        self.matched += pl
        self._checkpoint(st, plen)
        if self.events:
            self.num_events += len(cache.take_events())
        return True

    def finish(self, st: _Req) -> None:
        owned = st.plen + st.olen - 1
        self._checkpoint(st, owned)
        if st.protected < owned:  # never at page size 1: the whole row went in
            self.pool.free(st.rowv[st.protected: owned])
        self.cache.unlock(st.node)
        if self.events:
            self.num_events += len(self.cache.take_events())
        st.node = st.rowv = None
        self.free_rows.append(st.row)

    def _checkpoint(self, st: _Req, up_to: int) -> None:
        cache = self.cache
        key = st.full[:up_to]
        row = st.rowv
        kv = row[:up_to]
        present, node = cache.insert_node(key, kv)
        if self.split_prompt and 0 < st.plen < up_to:
            # SGLang's extra insert splits at the prompt boundary; the lock stays at the end
            cache.insert(st.full[: st.plen], kv[: st.plen])
        p = st.protected
        if present > p:
            # another request inserted [p, present) meanwhile: ours are duplicates
            self.pool.free(kv[p:present])
            row[p:present] = cache.path_slots(node)[p:present]
        cache.move_lock(st.node, node)  # lock(node), then unlock(st.node)
        st.node = node
        st.protected = up_to

    # -- untimed -----------------------------------------------------------
    def tree_tokens(self) -> int:
        return int(self.cache.total_size)

    def free_slots(self) -> int:
        return int(self.pool.available)


def replay(rk: Any, trace: Any, capacity: int, max_running: int = 16,
           split_prompt: bool = False, check: bool = False,
           instrument: Optional[Callable[[RadixkvDriver], None]] = None,
           before_loop: Optional[Callable[[RadixkvDriver], None]] = None,
           after_loop: Optional[Callable[[RadixkvDriver], None]] = None,
           events: bool = False) -> ReplayResult:
    """Replay ``trace`` once; per-request µs of cache work, hit and eviction counts.

    ``instrument`` may wrap the driver's cache and pool (``_profile.py`` does, in a
    separate pass: its wrappers add their own overhead to the timed total).
    ``before_loop`` / ``after_loop`` see the driver once its requests are prepared and
    once the last one finished (``_memory.py`` reads the heap there).
    """
    longest = max(len(r.prompt) + r.output_len for r in trace.requests)
    drv = RadixkvDriver(rk, capacity, max_running, longest + 8, split_prompt, events)
    if instrument is not None:
        instrument(drv)
    states = [drv.prepare(r) for r in trace.requests]
    per_req = [0] * len(states)
    running: deque[int] = deque()
    clock = time.perf_counter_ns
    retries = 0

    def finish_oldest() -> None:
        j = running.popleft()
        t0 = clock()
        drv.finish(states[j])
        per_req[j] += clock() - t0

    gc.collect()
    if before_loop is not None:
        before_loop(drv)
    t_start = clock()
    for i, st in enumerate(states):
        if len(running) >= max_running:
            finish_oldest()
        while True:
            t0 = clock()
            ok = drv.admit(st)
            per_req[i] += clock() - t0
            if ok:
                break
            if not running:
                raise RuntimeError(f"radixkv: request {trace.requests[i].id} cannot fit an "
                                   "empty pool")
            retries += 1
            finish_oldest()
        running.append(i)
        if check:
            drv.cache.check()
    while running:
        finish_oldest()
    wall = (clock() - t_start) / 1e9
    if after_loop is not None:
        after_loop(drv)
    if check:
        drv.cache.check()
    return ReplayResult(
        trace=trace.name,
        requests=len(states),
        per_req_us=[x / 1e3 for x in per_req],
        wall_s=wall,
        matched_tokens=drv.matched,
        prompt_tokens=sum(s.plen for s in states),
        evicted_tokens=int(drv.cache.evicted_tokens),
        admission_retries=retries,
        capacity_tokens=capacity,
        tree_tokens_end=drv.tree_tokens(),
        free_slots_end=drv.free_slots(),
    )


def median_of(results: List[ReplayResult]) -> Dict[str, Any]:
    """Median of every numeric field over repeats (the anchor reports medians too)."""
    rows = [r.summary() for r in results]
    out: Dict[str, Any] = {}
    for k, v in rows[0].items():
        out[k] = statistics.median(r[k] for r in rows) if isinstance(v, (int, float)) else v
    out["runs"] = [{k: r[k] for k in ("wall_s", "cache_s", "mean_us", "p99_us")} for r in rows]
    # Each request's fastest repeat: what is left when preemption by other processes is
    # filtered out (a diagnostic of a shared machine; the anchor reports no such figure).
    floor = sorted(min(xs) for xs in zip(*(r.per_req_us for r in results)))
    out["floor_mean_us"] = statistics.fmean(floor)
    out["floor_p50_us"] = floor[len(floor) // 2]
    out["floor_p99_us"] = floor[max(0, math.ceil(0.99 * len(floor)) - 1)]
    return out


def run_radixkv(rk: Any, traces: List[Any], capacities: List[int], repeats: int,
                max_running: int, split_prompt: bool = False,
                log: Optional[Any] = None, events: bool = False) -> List[Dict[str, Any]]:
    out = []
    for trace, cap in zip(traces, capacities):
        runs = [replay(rk, trace, cap, max_running, split_prompt, events=events)
                for _ in range(repeats)]
        med = median_of(runs)
        out.append(med)
        if log:
            tag = "radixkv+events" if events else "radixkv"
            log(f"{trace.name:10s} {tag:16s} wall {med['wall_s']:7.3f}s cache "
                f"{med['cache_s']:7.3f}s mean {med['mean_us']:8.2f}us p99 "
                f"{med['p99_us']:8.2f}us hit {med['hit_rate']:.4f} evicted "
                f"{med['evicted_tokens']} retries {med['admission_retries']}")
    return out
