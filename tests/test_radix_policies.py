"""Eviction policies and KV events against a naive model, step by step.

The model is a flat dict of nodes keyed by (namespace, path to the node's end); a node's parent
is the longest other node end that prefixes it, so splits are just new dict entries. It keeps
each node's access time, creation time, hit count, priority and direct locks, ticks its own
clock the way the cache documents (one tick per match that finds something, one per insert of a
whole page), and evicts by sorting every unlocked leaf by the policy's key, so it predicts
exactly which slots each eviction frees and in what order, and what each lock / unlock returns.

With events on, a "router" applies every ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``
and must know exactly the cached pages (by full prefix) after every step, with one hash each.

Budget: RADIXKV_HYPOTHESIS_EXAMPLES (default 300) split over the policies.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import radixkv as rk
from _radix_helpers import draw_shared_prefix

POLICIES = ["lru", "lfu", "fifo", "mru", "filo", "priority", "slru"]
EXAMPLES = max(10, int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "300")) // 6)
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
NAMESPACES: list[Any] = [None, "t1"]
Path = tuple[int, ...]
Key = tuple[Any, Path]


@dataclass
class Rec:
    slots: list[int]
    last: int
    created: int
    hits: int = 0
    prio: float = 0.0
    direct: int = 0


def policy_key(policy: str, r: Rec) -> tuple[Any, ...]:
    if policy == "lru":
        return (r.last,)
    if policy == "lfu":
        return (r.hits, r.last)
    if policy == "fifo":
        return (r.created,)
    if policy == "mru":
        return (-r.last,)
    if policy == "filo":
        return (-r.created,)
    if policy == "priority":
        return (r.prio, r.last)
    assert policy == "slru"
    return (int(r.hits >= 2), r.last)


@dataclass
class Model:
    page: int
    policy: str
    nodes: dict[Key, Rec] = field(default_factory=dict)
    clock: int = 0

    def parent_end(self, ns: Any, path: Path) -> int:
        ends = [len(p) for (n, p) in self.nodes if n == ns and len(p) < len(path) and path[: len(p)] == p]
        return max(ends, default=0)

    def has_children(self, ns: Any, path: Path) -> bool:
        return any(n == ns and len(p) > len(path) and p[: len(path)] == path for (n, p) in self.nodes)

    def lock_ref(self, ns: Any, path: Path) -> int:
        return sum(r.direct for (n, p), r in self.nodes.items() if n == ns and p[: len(path)] == path)

    def covering(self, ns: Any, prefix: Path) -> Optional[Path]:
        """The shortest node path that has ``prefix`` as a prefix (None if not cached)."""
        cands = [p for (n, p) in self.nodes if n == ns and p[: len(prefix)] == prefix]
        return min(cands, key=len) if cands else None

    def walk(self, ns: Any, toks: list[int]) -> int:
        usable = len(toks) - len(toks) % self.page
        k = 0
        while k + self.page <= usable and self.covering(ns, tuple(toks[: k + self.page])) is not None:
            k += self.page
        return k

    def split(self, ns: Any, at: Path) -> None:
        """Makes ``at`` a node end (it lies inside the node that covers it)."""
        if not at or (ns, at) in self.nodes:
            return
        full = self.covering(ns, at)
        assert full is not None
        r = self.nodes[(ns, full)]
        start = self.parent_end(ns, full)
        cut = len(at) - start
        self.nodes[(ns, at)] = Rec(r.slots[:cut], r.last, r.created, r.hits, r.prio, 0)
        r.slots = r.slots[cut:]

    def path_nodes(self, ns: Any, end: Path) -> list[Path]:
        return [p for (n, p) in self.nodes if n == ns and end[: len(p)] == p]

    def match(self, ns: Any, toks: list[int]) -> tuple[int, list[int]]:
        k = self.walk(ns, toks)
        end = tuple(toks[:k])
        if k == 0:
            return 0, []
        self.split(ns, end)
        self.clock += 1
        for p in self.path_nodes(ns, end):
            r = self.nodes[(ns, p)]
            r.last = self.clock
            r.hits += 1
        return k, self.path_slots(ns, end)

    def path_slots(self, ns: Any, end: Path) -> list[int]:
        out: list[int] = []
        for p in sorted(self.path_nodes(ns, end), key=len):
            out += self.nodes[(ns, p)].slots
        return out

    def insert(self, ns: Any, toks: list[int], slots: list[int], prio: float) -> int:
        usable = len(toks) - len(toks) % self.page
        k = self.walk(ns, toks)
        if usable == 0:
            return 0
        self.clock += 1
        end = tuple(toks[:usable])
        if k < usable:
            self.split(ns, tuple(toks[:k]))
            self.nodes[(ns, end)] = Rec(list(slots[k:usable]), self.clock, self.clock, 0, prio, 0)
            touched = self.path_nodes(ns, end)
        else:
            touched = self.path_nodes(ns, end)
            if (ns, end) not in self.nodes:
                cov = self.covering(ns, end)
                assert cov is not None
                touched.append(cov)
        for p in touched:
            r = self.nodes[(ns, p)]
            r.last = self.clock
            r.prio = max(r.prio, prio)
        return k

    def evictable(self) -> list[Key]:
        return [
            (n, p) for (n, p) in self.nodes if not self.has_children(n, p) and self.lock_ref(n, p) == 0
        ]

    def evict(self, num: int) -> list[int]:
        freed: list[int] = []
        while len(freed) < num:
            cands = self.evictable()
            if not cands:
                break
            keyed = sorted((policy_key(self.policy, self.nodes[c]), c) for c in cands)
            if len(keyed) > 1:
                assert keyed[0][0] != keyed[1][0], f"tie in the {self.policy} order: {keyed[:2]}"
            victim = keyed[0][1]
            freed += self.nodes.pop(victim).slots
        return freed

    def lock(self, ns: Any, end: Path) -> int:
        moved = sum(
            len(self.nodes[(ns, p)].slots) for p in self.path_nodes(ns, end) if self.lock_ref(ns, p) == 0
        )
        self.nodes[(ns, end)].direct += 1
        return moved

    def unlock(self, ns: Any, end: Path) -> int:
        self.nodes[(ns, end)].direct -= 1
        return -sum(
            len(self.nodes[(ns, p)].slots) for p in self.path_nodes(ns, end) if self.lock_ref(ns, p) == 0
        )

    def sizes(self) -> tuple[int, int]:
        prot = sum(len(r.slots) for (n, p), r in self.nodes.items() if self.lock_ref(n, p) > 0)
        total = sum(len(r.slots) for r in self.nodes.values())
        return total - prot, prot


class PolicyMachine(RuleBasedStateMachine):
    POLICY = "lru"
    PAGE = 1

    def __init__(self) -> None:
        super().__init__()
        self.cache = rk.RadixCache(None, page_size=self.PAGE, policy=self.POLICY, events=True,
                                   slot_dtype="int64")
        self.model = Model(self.PAGE, self.POLICY)
        self.history: list[list[int]] = [[]]
        self.next_slot = (1 << 40) if self.PAGE == 1 else 0  # int64-only ids on page 1
        self.handles: list[tuple[Any, Path, rk.Node]] = []
        self.router: dict[int, tuple[Any, Path]] = {}

    def draw_tokens(self, data: st.DataObject) -> list[int]:
        return draw_shared_prefix(data, self.history, max_tail=8, max_len=24)

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES),
          prio=st.sampled_from([0.0, 0.0, 1.0, 2.5, -1.0]))
    def insert(self, data: st.DataObject, ns: Any, prio: float) -> None:
        toks = self.draw_tokens(data)
        slots = list(range(self.next_slot, self.next_slot + len(toks)))
        self.next_slot += len(toks)
        want = self.model.insert(ns, toks, slots, prio)
        got = self.cache.insert(toks, np.asarray(slots, dtype=np.int64), namespace=ns, priority=prio)
        assert got == want, (got, want)

    @rule(data=st.data(), ns=st.sampled_from(NAMESPACES))
    def match(self, data: st.DataObject, ns: Any) -> None:
        toks = self.draw_tokens(data)
        n, slots = self.model.match(ns, toks)
        m = self.cache.match_prefix(toks, namespace=ns)
        assert m.length == n and m.slots.dtype == np.int64 and m.slots.tolist() == slots
        if n:
            self.handles.append((ns, tuple(toks[:n]), m.node))

    def _live(self, data: st.DataObject) -> Optional[tuple[Any, Path, rk.Node]]:
        live = [h for h in self.handles if (h[0], h[1]) in self.model.nodes]
        if not live:
            return None
        return data.draw(st.sampled_from(live), label="handle")

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def lock(self, data: st.DataObject) -> None:
        h = self._live(data)
        if h is None:
            return
        ns, path, node = h
        assert self.cache.lock(node) == self.model.lock(ns, path)

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        h = self._live(data)
        if h is None:
            return
        ns, path, node = h
        if self.model.nodes[(ns, path)].direct == 0:
            with pytest.raises(rk.NotLocked):
                self.cache.unlock(node)
            return
        assert self.cache.unlock(node) == self.model.unlock(ns, path)

    @rule(n=st.integers(0, 12))
    def evict(self, n: int) -> None:
        want = self.model.evict(n)
        got = self.cache.evict_slots(n).tolist()
        assert got == want, (self.POLICY, got, want)
        # An evicted path end retires its handles, even if the same path is cached again.
        self.handles = [h for h in self.handles if (h[0], h[1]) in self.model.nodes]

    @invariant()
    def consistent(self) -> None:
        self.cache.check()
        ev, prot = self.model.sizes()
        assert (self.cache.evictable_size, self.cache.protected_size) == (ev, prot)
        self.apply_events()
        cached = set()
        for (ns, path), _ in self.model.nodes.items():
            for k in range(self.PAGE, len(path) + 1, self.PAGE):
                cached.add((ns, path[:k]))
        assert set(self.router.values()) == cached
        assert len(self.router) == len(cached)

    def apply_events(self) -> None:
        for e in self.cache.take_events():
            if isinstance(e, rk.BlockStored):
                assert e.block_size == self.PAGE
                assert len(e.token_ids) == len(e.block_hashes) * self.PAGE
                prefix: Path = ()
                if e.parent_block_hash is not None:
                    ns, prefix = self.router[e.parent_block_hash]
                    assert ns == e.namespace
                for i, h in enumerate(e.block_hashes):
                    prefix = prefix + tuple(e.token_ids[i * self.PAGE:(i + 1) * self.PAGE])
                    assert h not in self.router, "a stored hash is already known"
                    self.router[h] = (e.namespace, prefix)
            elif isinstance(e, rk.BlockRemoved):
                for h in e.block_hashes:
                    del self.router[h]
            else:
                assert isinstance(e, rk.AllBlocksCleared)
                self.router.clear()


def _machine(policy: str, page: int) -> type[PolicyMachine]:
    return type(f"{policy}_{page}", (PolicyMachine,), {"POLICY": policy, "PAGE": page})


@pytest.mark.parametrize("page", [1, 2])
@pytest.mark.parametrize("policy", POLICIES)
def test_policy_matches_model(policy: str, page: int) -> None:
    run_state_machine_as_test(_machine(policy, page), settings=SETTINGS)


# ---- targeted cases -------------------------------------------------------------------------


def _cache(policy: str, **kw: Any) -> rk.RadixCache:
    return rk.RadixCache(None, policy=policy, **kw)


def test_each_policy_orders_three_leaves() -> None:
    """Three sibling leaves A (old, hit twice), B (middle, priority 5), C (newest)."""
    order = {}
    for policy in POLICIES:
        c = _cache(policy)
        c.insert([1, 1], [10, 11])
        c.insert([2, 2], [20, 21], priority=5.0)
        c.insert([3, 3], [30, 31])
        c.match_prefix([1, 1])
        c.match_prefix([1, 1])
        c.match_prefix([3, 3])
        order[policy] = [int(c.evict_slots(1)[0]) // 10 for _ in range(3)]
        c.check()
    assert order == {
        "lru": [2, 1, 3],
        "lfu": [2, 3, 1],
        "fifo": [1, 2, 3],
        "mru": [3, 1, 2],
        "filo": [3, 2, 1],
        "priority": [1, 3, 2],
        "slru": [2, 3, 1],
    }


def test_priority_is_max_propagated_and_locked_paths_survive() -> None:
    c = _cache("priority")
    c.insert([1, 2, 3], [1, 2, 3], priority=9.0)
    c.insert([1, 2, 4], [1, 2, 4], priority=1.0)  # splits: [1, 2] keeps 9
    top = c.match_prefix([1, 2]).node
    assert top.priority == 9.0 and [ch.priority for ch in top.children] == [9.0, 1.0]
    low = c.match_prefix([1, 2, 4]).node
    assert c.lock(low) == 3
    assert c.evict_slots(10).tolist() == [3]  # the priority-9 leaf: the other path is locked
    assert c.unlock(low) == -3
    c.check()


def test_lock_deltas_count_only_newly_protected_tokens() -> None:
    c = _cache("lru")
    c.insert([1, 2, 3, 4], [0, 1, 2, 3])
    a = c.match_prefix([1, 2, 3, 4]).node
    b = c.match_prefix([1, 2]).node
    assert c.lock(a) == 4 and c.lock(b) == 0 and c.lock(a) == 0
    assert c.unlock(a) == 0 and c.unlock(a) == -2 and c.unlock(b) == -2
    assert c.protected_size == 0
    assert c.move_lock(c.root, a) == 4


def test_node_view() -> None:
    c = _cache("lru", slot_dtype="int64")
    c.insert([1, 2, 3], [7, 8, 9])
    c.insert([1, 2, 5, 6], [7, 8, 10, 11])
    mid = c.match_prefix([1, 2]).node
    assert mid.key == [1, 2] and mid.value.tolist() == [7, 8] and mid.value.dtype == np.int64
    assert mid.parent.is_root and mid.depth == 2 and mid.length == 2
    kids = mid.children
    assert [k.key for k in kids] == [[3], [5, 6]]
    assert all(k.parent == mid for k in kids)
    assert [k.key for k in c.root.children] == [[1, 2]]
    assert kids[1].created > kids[0].created and mid.created == kids[0].created
    c.lock(kids[1])
    assert (mid.lock_ref, kids[1].lock_ref, kids[0].lock_ref) == (1, 1, 0)


def test_events_off_by_default_and_split_emits_nothing() -> None:
    assert _cache("lru").take_events() == [] and not _cache("lru").events
    c = _cache("lru", events=True, page_size=2)
    c.insert([1, 2, 3, 4, 5], [0, 1, 2, 3, 4])
    (st1,) = c.take_events()
    assert isinstance(st1, rk.BlockStored) and st1.token_ids == [1, 2, 3, 4]
    assert st1.parent_block_hash is None and len(st1.block_hashes) == 2 and st1.namespace is None
    c.match_prefix([1, 2, 9, 9])  # splits after the first page
    assert c.take_events() == []
    c.insert([1, 2, 7, 7], [0, 1, 5, 6], namespace=("a", None))
    c.insert([1, 2, 7, 7], [0, 1, 5, 6])
    ev = c.take_events()
    assert [type(e) for e in ev] == [rk.BlockStored, rk.BlockStored]
    assert ev[0].namespace == ("a", None) and ev[0].parent_block_hash is None
    assert ev[1].parent_block_hash == st1.block_hashes[0]  # chained from the split page
    assert ev[0].block_hashes[0] != st1.block_hashes[0]  # namespaces hash apart
    removed = c.evict_slots(2)
    assert len(removed) == 2
    (rm,) = c.take_events()
    assert isinstance(rm, rk.BlockRemoved) and len(rm.block_hashes) == 1
    c.reset()
    assert [type(e) for e in c.take_events()] == [rk.AllBlocksCleared]


def test_int64_ids_and_dtype_choice() -> None:
    big = 2**40
    c = rk.RadixCache(None)
    assert c.slot_dtype == "int32"
    c.insert([1, 2], np.array([5, 6], dtype=np.int32))
    assert c.match_prefix([1, 2]).slots.dtype == np.int32
    assert c.match_prefix([1, 2], dtype="int64").slots.dtype == np.int64
    c.insert([3, 4], np.array([big, 2**63 - 1], dtype=np.int64))
    before = c.dump()
    with pytest.raises(rk.InvalidArgument, match="int32"):
        c.match_prefix([3, 4])  # refused before the match touches anything
    with pytest.raises(rk.InvalidArgument, match="int32"):
        c.evict_slots(100)
    assert c.dump() == before
    m = c.match_prefix([3, 4], dtype=np.int64)
    assert m.slots.tolist() == [big, 2**63 - 1]
    out = np.zeros(4, dtype=np.int64)
    assert c.match_prefix([3, 4, 0], out=out).slots.tolist() == [big, 2**63 - 1]
    try:
        import torch
    except ImportError:
        return
    t = torch.tensor([big + 1, big + 2], dtype=torch.int64)
    c.insert([7, 8], t)
    assert c.path_slots(c.match_prefix([7, 8], dtype=torch.int64).node, dtype="int64").tolist() == [
        big + 1, big + 2]
    pool = rk.TokenPool(8)
    assert pool.alloc(2, dtype="int64").dtype == np.int64


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: rk.RadixCache(None, policy="lruu"), rk.InvalidArgument, "unknown eviction policy"),
        (lambda: rk.RadixCache(None, slot_dtype="float32"), rk.InvalidArgument, "dtype"),
        (lambda: rk.RadixCache(None, page_size=0), rk.InvalidArgument, "page_size"),
    ],
)
def test_bad_options(call: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize(
    "kwargs, slots, match",
    [
        ({"priority": math.nan}, [0, 1], "priority"),
        ({"priority": math.inf}, [0, 1], "priority"),
        ({}, np.array([0.0, 1.0]), "integer"),
        ({}, [0, -1], "negative"),
        ({}, [0, 2**64], "int64"),
        ({}, np.array([0, 2**63], dtype=np.uint64), "int64"),
        ({}, [0, True], "bool"),
    ],
)
def test_bad_insert_changes_nothing(kwargs: dict[str, Any], slots: Any, match: str) -> None:
    for pool in (None, rk.TokenPool(8)):
        c = rk.RadixCache(pool, policy="priority", events=True)
        if pool is not None:
            c.insert([5], c.alloc(1))
        c.take_events()
        before = (c.dump(), c.total_size, None if pool is None else pool.available)
        with pytest.raises(rk.InvalidArgument, match=match):
            c.insert([1, 2], slots, **kwargs)
        assert (c.dump(), c.total_size, None if pool is None else pool.available) == before
        assert c.take_events() == []
        c.check()


def test_bad_dtype_and_out_of_pool_range() -> None:
    pool = rk.TokenPool(8)
    c = rk.RadixCache(pool)
    with pytest.raises(rk.InvalidArgument, match="dtype"):
        c.alloc(2, dtype="float64")
    with pytest.raises(rk.InvalidArgument, match="out of range"):
        c.insert([1], np.array([2**33], dtype=np.int64))
    assert pool.available == 8 and c.total_size == 0
    with pytest.raises(rk.InvalidArgument, match="locked"):
        s = c.alloc(2)
        c.insert([1, 2], s)
        c.lock(c.match_prefix([1, 2]).node)
        c.reset()
    assert c.total_size == 2
    c.check()
