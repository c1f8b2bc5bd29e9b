"""Stateful property test: RadixCache + TokenPool against a naive Python model.

The model maps (namespace, page-aligned prefix) -> the slots of that prefix's last page, and
counts lock() calls per handle. It knows nothing of nodes or LRU order; it predicts what a
caller sees: match / peek lengths and slots, insert's return value, which unlocks fail, which
handles are stale (exactly those whose path was evicted at some point), and sizes. Token
generators mostly extend or branch off earlier sequences over a 3-letter alphabet, so nodes
split all the time. ``cache.check()`` is an invariant after every step.

Budget: RADIXKV_HYPOTHESIS_EXAMPLES (default 300 examples of up to 40 steps per machine).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import radixkv as rk

EXAMPLES = int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "300"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
NAMESPACES: list[Any] = [None, "t1", ("t1", None)]

Key = tuple[Any, tuple[int, ...]]


class RadixMachine(RuleBasedStateMachine):
    """The machine; subclasses set PAGE / SLOTS, and `wrap` lets the self-test plant bugs."""

    PAGE = 1
    SLOTS = 48

    def wrap(self, cache: rk.RadixCache) -> Any:
        return cache

    def __init__(self) -> None:
        super().__init__()
        self.pool = rk.TokenPool(self.SLOTS, page_size=self.PAGE)
        self.raw = rk.RadixCache(self.pool)
        self.cache = self.wrap(self.raw)
        self.model: dict[Key, tuple[int, ...]] = {}
        self.history: list[list[int]] = [[]]
        self.handles: list[tuple[Any, tuple[int, ...], rk.Node]] = []
        self.dead: set[int] = set()  # indices into handles
        self.locks: dict[rk.Node, int] = {}
        self.outstanding: list[np.ndarray] = []

    # ---- generators -------------------------------------------------------------------------

    def draw_tokens(self, data: st.DataObject) -> list[int]:
        base = data.draw(st.sampled_from(self.history), label="base")
        keep = data.draw(st.integers(0, len(base)), label="keep")
        tail = data.draw(st.lists(st.integers(0, 2), max_size=10), label="tail")
        toks = (base[:keep] + tail)[:40]
        self.history.append(toks)
        return toks

    # ---- model ------------------------------------------------------------------------------

    def expected(self, ns: Any, toks: list[int]) -> tuple[int, list[int]]:
        p = self.PAGE
        slots: list[int] = []
        for k in range(p, len(toks) - len(toks) % p + 1, p):
            page = self.model.get((ns, tuple(toks[:k])))
            if page is None:
                break
            slots.extend(page)
        return len(slots), slots

    def sync(self) -> None:
        """Drops model pages the pool no longer counts as cached (evicted); retires handles."""
        held = {s for row in self.raw.dump() for s in row[2]}
        self.model = {k: v for k, v in self.model.items() if all(s in held for s in v)}
        for i, (ns, path, _) in enumerate(self.handles):
            if path and (ns, path) not in self.model:
                self.dead.add(i)
        for (ns, path) in self.model:
            if len(path) > self.PAGE:
                assert (ns, path[: len(path) - self.PAGE]) in self.model, "not prefix-closed"

    def protected(self) -> int:
        prefixes = set()
        for i, (ns, path, node) in enumerate(self.handles):
            if self.locks.get(node, 0) > 0:
                assert i not in self.dead, "a locked path was evicted"
                for k in range(self.PAGE, len(path) + 1, self.PAGE):
                    prefixes.add((ns, path[:k]))
        return len(prefixes) * self.PAGE

    # ---- rules ------------------------------------------------------------------------------

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def insert(self, data: st.DataObject, ns: Any) -> None:
        toks = self.draw_tokens(data)
        usable = len(toks) - len(toks) % self.PAGE
        short = self.pool.available + self.cache.evictable_size < usable
        try:
            slots = self.cache.alloc(usable)
        except rk.OutOfSlots:
            assert short, "alloc refused although eviction would have been enough"
            return
        assert not short
        self.sync()
        k_expected, _ = self.expected(ns, toks)
        tail = np.zeros(len(toks) - usable, dtype=np.int32)
        k = self.cache.insert(toks, np.concatenate([slots, tail]), namespace=ns)
        assert k == k_expected, f"insert returned {k}, model {k_expected}"
        for j in range(k + self.PAGE, usable + 1, self.PAGE):
            self.model[(ns, tuple(toks[:j]))] = tuple(int(s) for s in slots[j - self.PAGE : j])
        self.pool.free(slots[:k])

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def match(self, data: st.DataObject, ns: Any) -> None:
        toks = self.draw_tokens(data)
        n, slots = self.expected(ns, toks)
        m = self.cache.match_prefix(toks, namespace=ns)
        assert m.length == n and m.slots.tolist() == slots
        self.handles.append((ns, tuple(toks[:n]), m.node))

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def peek(self, data: st.DataObject, ns: Any) -> None:
        toks = self.draw_tokens(data)
        before = self.raw.dump()
        assert self.cache.peek_prefix(toks, namespace=ns) == self.expected(ns, toks)[0]
        assert self.raw.dump() == before

    def _handle(self, data: st.DataObject) -> tuple[int, Any, tuple[int, ...], rk.Node]:
        i = data.draw(st.integers(0, len(self.handles) - 1), label="handle")
        ns, path, node = self.handles[i]
        return i, ns, path, node

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def lock(self, data: st.DataObject) -> None:
        i, _, _, node = self._handle(data)
        if i in self.dead:
            with pytest.raises(rk.StaleHandle):
                self.cache.lock(node)
            return
        self.cache.lock(node)
        if not node.is_root:
            self.locks[node] = self.locks.get(node, 0) + 1

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        i, _, _, node = self._handle(data)
        if i in self.dead:
            with pytest.raises(rk.StaleHandle):
                self.cache.unlock(node)
        elif node.is_root:
            self.cache.unlock(node)
        elif self.locks.get(node, 0) == 0:
            with pytest.raises(rk.NotLocked):
                self.cache.unlock(node)
        else:
            self.cache.unlock(node)
            self.locks[node] -= 1

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def path_slots(self, data: st.DataObject) -> None:
        i, ns, path, node = self._handle(data)
        if i in self.dead:
            with pytest.raises(rk.StaleHandle):
                self.cache.path_slots(node)
            return
        assert self.cache.path_slots(node).tolist() == self.expected(ns, list(path))[1]

    @rule(n=st.integers(0, 30))
    def evict(self, n: int) -> None:
        evictable = self.cache.evictable_size
        known = {s for v in self.model.values() for s in v}
        freed = self.cache.evict_slots(n).tolist()
        assert set(freed) <= known
        assert len(freed) >= min(n, evictable)
        self.sync()

    @rule(pages=st.integers(0, 6))
    def alloc(self, pages: int) -> None:
        n = pages * self.PAGE
        short = self.pool.available + self.cache.evictable_size < n
        try:
            self.outstanding.append(self.cache.alloc(n))
        except rk.OutOfSlots:
            assert short
        self.sync()

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.outstanding) - 1), label="which")
        self.pool.free(self.outstanding.pop(i))

    @invariant()
    def consistent(self) -> None:
        self.raw.check()
        total = len(self.model) * self.PAGE
        assert self.cache.total_size == total, (self.cache.total_size, total)
        assert self.cache.protected_size == self.protected()
        assert self.cache.evictable_size == total - self.cache.protected_size
        # lock_ref of a live node = the locks taken through it and through every deeper handle.
        where = {node: (ns, path) for ns, path, node in self.handles}
        for i, (ns, path, node) in enumerate(self.handles):
            if i in self.dead or node.is_root:
                continue
            want = sum(
                c for n, c in self.locks.items() if where[n][0] == ns and where[n][1][: len(path)] == path
            )
            assert node.lock_ref == want, (path, node.lock_ref, want)
        out = sum(len(a) for a in self.outstanding)
        assert self.pool.num_out == out and self.pool.num_cached == total


class PagedMachine(RadixMachine):
    PAGE = 2
    SLOTS = 48


def _run(machine: type[RadixMachine]) -> None:
    run_state_machine_as_test(machine, settings=SETTINGS)


def test_radix_cache_matches_model() -> None:
    _run(RadixMachine)


def test_radix_cache_matches_model_paged() -> None:
    _run(PagedMachine)


# ---- the harness can fail: planted bugs must be caught ------------------------------------------


class _Proxy:
    def __init__(self, cache: rk.RadixCache) -> None:
        self._c = cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


class _DropsSecondLock(_Proxy):
    """Forgets a lock when the node is already locked (a lost lock_ref increment)."""

    def lock(self, node: rk.Node) -> None:
        if not node.is_root and node.lock_ref > 0:
            return
        self._c.lock(node)


class _OffByOneInsert(_Proxy):
    """Reports one token fewer already cached than there were."""

    def insert(self, tokens: Any, slots: Any, namespace: Any = None) -> int:
        k: int = self._c.insert(tokens, slots, namespace=namespace)
        return k - 1 if k > 0 else k


class _MatchIgnoresNamespace(_Proxy):
    """Matches everything in the default namespace."""

    def match_prefix(self, tokens: Any, namespace: Any = None) -> rk.Match:
        return self._c.match_prefix(tokens)


@pytest.mark.parametrize("bug", [_DropsSecondLock, _OffByOneInsert, _MatchIgnoresNamespace])
def test_planted_bug_is_caught(bug: Callable[[rk.RadixCache], Any]) -> None:
    class Broken(RadixMachine):
        def wrap(self, cache: rk.RadixCache) -> Any:
            return bug(cache)

    # No shrinking: the point is that a failure is found, not a minimal one.
    found = settings(
        SETTINGS, max_examples=1000, database=None, phases=[Phase.generate], derandomize=True
    )
    with pytest.raises((AssertionError, rk.RadixKVError, pytest.fail.Exception)):
        run_state_machine_as_test(Broken, settings=found)
