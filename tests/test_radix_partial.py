"""Sub-page reuse (``RadixCache(..., partial_pages=True)``) against a token-granular model.

The model is the set of cached token prefixes (namespace, tokens[:i]) with the slots of each
prefix's last token (a set: a partial page shadowed by a longer partial page or by a whole page
keeps its own copy until it is evicted); it is prefix-closed. A match reuses the longest cached prefix that ends on
a page boundary (``length``), then the tail: the longest further run of cached tokens, at most a
page minus one (``tail_length``, ``tail_slots``). An insert adds the whole pages after the part
already cached, and the partial last page unless its tokens are all cached already (then the
caller keeps every slot). Evictions are read back from the pool (which slots are still cached),
so the model needs no node structure. ``check()`` after every step; the pool must balance.

Budget: RADIXKV_HYPOTHESIS_EXAMPLES (default 300) / 2 per page size.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import radixkv as rk
from _radix_helpers import draw_shared_prefix

EXAMPLES = max(10, int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "300")) // 2)
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=35, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
NAMESPACES: list[Any] = [None, "x"]


class PartialMachine(RuleBasedStateMachine):
    PAGE = 4
    PAGES = 24

    def __init__(self) -> None:
        super().__init__()
        self.pool = rk.TokenPool(self.PAGE * self.PAGES, page_size=self.PAGE)
        self.cache = rk.RadixCache(self.pool, partial_pages=True, events=True)
        self.model: dict[tuple[Any, tuple[int, ...]], set[int]] = {}
        self.history: list[list[int]] = [[]]
        self.locked: list[rk.Node] = []
        self.out: list[np.ndarray] = []

    def draw(self, data: st.DataObject) -> list[int]:
        return draw_shared_prefix(data, self.history, max_tail=9, max_len=26)

    def expected(self, ns: Any, toks: list[int]) -> tuple[int, int]:
        p = self.PAGE
        whole = 0
        while whole + p <= len(toks) and (ns, tuple(toks[: whole + p])) in self.model:
            whole += p
        k = 0
        while k < p - 1 and whole + k < len(toks) and (ns, tuple(toks[: whole + k + 1])) in self.model:
            k += 1
        return whole, k

    def sync(self) -> None:
        held = {s for row in self.cache.dump() for s in row[2]}
        kept = {key: {s for s in v if s in held} for key, v in self.model.items()}
        self.model = {key: v for key, v in kept.items() if v}

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def insert(self, data: st.DataObject, ns: Any) -> None:
        toks = self.draw(data)
        n, p = len(toks), self.PAGE
        pages = -(-n // p)
        try:
            slots = self.cache.alloc(pages * p)
        except rk.OutOfSlots:
            self.sync()
            return
        self.sync()
        whole, _ = self.expected(ns, toks)
        usable = n - n % p
        tail_present = n > usable and (ns, tuple(toks)) in self.model
        ret = self.cache.insert(toks, slots[:n], namespace=ns)
        if tail_present and whole == usable:
            assert ret == n, (ret, n)
            taken_to = whole
        else:
            assert ret == whole, (ret, whole)
            taken_to = n
        for i in range(whole, taken_to):
            self.model.setdefault((ns, tuple(toks[: i + 1])), set()).add(int(slots[i]))
        # the caller frees what the cache did not take
        keep = np.concatenate([slots[:whole], slots[taken_to:]])
        if len(keep):
            self.pool.free(keep)

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES), lock=st.booleans())
    def match(self, data: st.DataObject, ns: Any, lock: bool) -> None:
        toks = self.draw(data)
        whole, k = self.expected(ns, toks)
        m = self.cache.match_prefix(toks, namespace=ns)
        assert (m.length, m.tail_length) == (whole, k), (toks, m.length, m.tail_length, whole, k)
        want = [self.model[(ns, tuple(toks[: i + 1]))] for i in range(whole + k)]
        assert len(m.slots) == whole and all(s in w for s, w in zip(m.slots.tolist(), want))
        if k:
            tail = m.tail_slots.tolist() if m.tail_slots is not None else []
            assert len(tail) == k and all(s in w for s, w in zip(tail, want[whole:]))
            assert tail[0] % self.PAGE == 0 and tail == list(range(tail[0], tail[0] + k)), (
                "a tail is the start of one page")
            if lock:
                self.cache.lock(m.tail_node)
                self.locked.append(m.tail_node)
        else:
            assert m.tail_slots is None and m.tail_node is None

    @precondition(lambda self: self.locked)
    @rule()
    def unlock(self) -> None:
        self.cache.unlock(self.locked.pop())

    @rule(n=st.integers(0, 20))
    def evict(self, n: int) -> None:
        self.cache.evict(n)
        self.sync()

    @rule(pages=st.integers(0, 6))
    def alloc(self, pages: int) -> None:
        try:
            self.out.append(self.cache.alloc(pages * self.PAGE))
        except rk.OutOfSlots:
            pass
        self.sync()

    @precondition(lambda self: self.out)
    @rule()
    def free(self) -> None:
        self.pool.free(self.out.pop())

    @invariant()
    def consistent(self) -> None:
        self.cache.check()
        cached = sum(len(v) for v in self.model.values())
        assert self.cache.total_size == cached and self.pool.num_cached == cached
        assert self.pool.num_out == sum(len(a) for a in self.out)
        for e in self.cache.take_events():  # partial pages never reach a router
            if isinstance(e, rk.BlockStored):
                assert len(e.token_ids) == len(e.block_hashes) * self.PAGE


class PartialMachine2(PartialMachine):
    PAGE = 2


@pytest.mark.parametrize("machine", [PartialMachine, PartialMachine2])
def test_partial_pages_match_model(machine: type[PartialMachine]) -> None:
    run_state_machine_as_test(machine, settings=SETTINGS)


def test_partial_pages_example() -> None:
    pool = rk.TokenPool(64, page_size=4)
    c = rk.RadixCache(pool, partial_pages=True)
    s = c.alloc(12)
    assert c.insert(list(range(10)), s[:10]) == 0  # 2 pages + a 2-token partial page
    pool.free(s[10:])
    assert c.total_size == 10 and pool.num_cached == 10
    m = c.match_prefix(list(range(9)) + [99])
    assert (m.length, m.tail_length, m.tail_slots.tolist()) == (8, 1, [int(s[8])])
    m = c.match_prefix(list(range(6)) + [7])  # diverges inside the second page
    assert (m.length, m.tail_length, m.tail_slots.tolist()) == (4, 2, [int(s[4]), int(s[5])])
    # the same partial page again: nothing taken, every slot stays the caller's
    s2 = c.alloc(12)
    assert c.insert(list(range(10)), s2[:10]) == 10
    pool.free(s2)
    c.check()
    # page_size 1 or the option off: no tails, the partial page is not cached
    off = rk.RadixCache(None, page_size=4)
    assert not off.partial_pages and off.insert(list(range(10)), list(range(10))) == 0
    assert off.total_size == 8 and off.match_prefix(list(range(10))).tail_length == 0


def test_partial_page_slots_must_start_a_page() -> None:
    pool = rk.TokenPool(32, page_size=4)
    c = rk.RadixCache(pool, partial_pages=True)
    s = c.alloc(8)
    before = (c.dump(), pool.available, pool.num_out)
    with pytest.raises(rk.InvalidArgument, match="partial last page"):
        c.insert(list(range(6)), np.concatenate([s[:4], s[5:7]]))
    assert (c.dump(), pool.available, pool.num_out) == before
    c.check()
