"""Bad input to RadixCache / TokenPool: each case raises its typed error and changes nothing.

Every case runs against the same populated cache (two namespaces, a locked path, a split node,
an evicted handle, slots handed out) and compares a whole-state snapshot before and after.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

import radixkv as rk
from _radix_helpers import snapshot, torch


@dataclass
class World:
    pool: rk.TokenPool
    cache: rk.RadixCache
    locked: rk.Node
    unlocked: rk.Node
    stale: rk.Node
    out: list[int]
    cached: list[int]
    extra: dict[str, Any] = field(default_factory=dict)


def world(page_size: int = 1) -> World:
    p = page_size
    pool = rk.TokenPool(16 * p, page_size=p)
    cache = rk.RadixCache(pool)
    a = cache.alloc(4 * p)
    cache.insert(list(range(10, 10 + 4 * p)), a)
    b = cache.alloc(2 * p)
    cache.insert(list(range(50, 50 + 2 * p)), b, namespace="tenant")
    locked = cache.match_prefix(list(range(10, 10 + 4 * p))).node
    cache.lock(locked)
    unlocked = cache.match_prefix(list(range(10, 10 + 2 * p))).node  # splits the locked path
    c = cache.alloc(2 * p)
    cache.insert(list(range(90, 90 + 2 * p)), c)
    stale = cache.match_prefix(list(range(90, 90 + 2 * p))).node
    cache.match_prefix(list(range(50, 50 + 2 * p)), namespace="tenant")
    cache.evict(2 * p)  # evicts the [90..] leaf, now the least recently used unlocked one
    assert cache.peek_prefix(list(range(90, 90 + 2 * p))) == 0
    out = cache.alloc(2 * p).tolist()
    cache.check()
    assert cache.evictable_size == 2 * p
    return World(pool, cache, locked, unlocked, stale, out, a.tolist())


def _insert_new(w: World, toks: Any, slots: Any) -> Any:
    return w.cache.insert(toks, slots)


CASES: list[tuple[str, Callable[[World], Any], type[Exception]]] = [
    # wrong lengths
    ("insert: fewer slots than tokens", lambda w: w.cache.insert([1, 2, 3], w.out[:1]), rk.InvalidArgument),
    ("insert: more slots than tokens", lambda w: w.cache.insert([1], w.out), rk.InvalidArgument),
    # negative / out-of-range tokens and slots
    ("match: negative token", lambda w: w.cache.match_prefix([10, -1]), rk.InvalidArgument),
    ("peek: negative token", lambda w: w.cache.peek_prefix([-5]), rk.InvalidArgument),
    ("match_node: negative token", lambda w: w.cache.match_node([10, -1]), rk.InvalidArgument),
    ("match_node: float tokens", lambda w: w.cache.match_node([1.0, 2.0]), rk.InvalidArgument),
    ("match_node: bad namespace", lambda w: w.cache.match_node([1], 3.5), rk.InvalidArgument),
    ("insert: negative token", lambda w: w.cache.insert([1, -2], w.out), rk.InvalidArgument),
    ("insert: token beyond int32", lambda w: w.cache.insert([1, 2**31], w.out), rk.InvalidArgument),
    ("insert: int64 array token beyond int32", lambda w: w.cache.insert(np.array([1, 2**31], dtype=np.int64), w.out), rk.InvalidArgument),
    ("match: int64 array token below int32", lambda w: w.cache.match_prefix(np.array([10, -2**40], dtype=np.int64)), rk.InvalidArgument),
    ("checkpoint: int64 array token beyond int32", lambda w: w.cache.checkpoint(np.array([2**32 + 1, 2], dtype=np.int64), w.out), rk.InvalidArgument),
    # int64 arrays are read in place (compared at 64 bits): an id past the cached prefix, or
    # one whose low 32 bits equal the cached token there, is refused after the walk
    ("match_node: int64 array, id beyond int32 after a hit", lambda w: w.cache.match_node(np.array([10, 11, 2**31], dtype=np.int64)), rk.InvalidArgument),
    ("match_node: int64 array, low half of a cached id", lambda w: w.cache.match_node(np.array([10, 11 + 2**32], dtype=np.int64)), rk.InvalidArgument),
    ("peek: int64 array, id below int32 after a hit", lambda w: w.cache.peek_prefix(np.array([10, 11, 12, -2**31 - 1], dtype=np.int64)), rk.InvalidArgument),
    ("peek: int64 array, negative id after a hit", lambda w: w.cache.peek_prefix(np.array([10, 11, -3], dtype=np.int64)), rk.InvalidArgument),
    ("insert_node: int64 array, id beyond int32 after a hit", lambda w: w.cache.insert_node(np.array([10, 11, 2**40], dtype=np.int64), [w.cached[0], w.cached[1], w.out[0]]), rk.InvalidArgument),
    ("checkpoint: int64 array, low half of a cached id, lock held", lambda w: w.cache.checkpoint(np.array([10, 11, 12 + 2**32], dtype=np.int64), [w.cached[0], w.cached[1], w.out[0]], lock_from=w.locked), rk.InvalidArgument),
    ("insert: negative slot", lambda w: w.cache.insert([1, 2], [w.out[0], -1]), rk.InvalidArgument),
    ("insert: slot out of range", lambda w: w.cache.insert([1, 2], [w.out[0], 10_000]), rk.InvalidArgument),
    ("insert: slot never allocated", lambda w: w.cache.insert([1, 2], [w.out[0], 15]), rk.InvalidArgument),
    ("insert: slot listed twice", lambda w: w.cache.insert([1, 2], [w.out[0], w.out[0]]), rk.InvalidArgument),
    ("insert: slot the tree holds", lambda w: w.cache.insert([1, 2], [w.out[0], w.cached[0]]), rk.InvalidArgument),
    # floats / strings / other types as tokens
    ("match: float tokens", lambda w: w.cache.match_prefix([1.0, 2.0]), rk.InvalidArgument),
    ("match: float array", lambda w: w.cache.match_prefix(np.ones(3)), rk.InvalidArgument),
    ("match: 2-D array", lambda w: w.cache.match_prefix(np.ones((2, 2), dtype=np.int32)), rk.InvalidArgument),
    ("match: string", lambda w: w.cache.match_prefix("abc"), rk.InvalidArgument),
    ("match: bool tokens", lambda w: w.cache.match_prefix([True, False]), rk.InvalidArgument),
    ("insert: string slots", lambda w: w.cache.insert([1, 2], ["a", "b"]), rk.InvalidArgument),
    ("insert: None tokens", lambda w: w.cache.insert(None, w.out), rk.InvalidArgument),
    # namespaces
    ("match: int namespace", lambda w: w.cache.match_prefix([10], namespace=1), rk.InvalidArgument),
    ("insert: bytes namespace", lambda w: w.cache.insert([1, 2], w.out, namespace=b"x"), rk.InvalidArgument),
    ("insert: nested tuple namespace", lambda w: w.cache.insert([1, 2], w.out, namespace=(("a",),)), rk.InvalidArgument),
    # handles
    ("unlock: unlocked node", lambda w: w.cache.unlock(w.unlocked), rk.NotLocked),
    ("lock: retired handle", lambda w: w.cache.lock(w.stale), rk.StaleHandle),
    ("unlock: retired handle", lambda w: w.cache.unlock(w.stale), rk.StaleHandle),
    ("path_slots: retired handle", lambda w: w.cache.path_slots(w.stale), rk.StaleHandle),
    ("node info: retired handle", lambda w: w.stale.lock_ref, rk.StaleHandle),
    ("lock: not a node", lambda w: w.cache.lock(3), rk.InvalidArgument),
    # checkpoint (insert + boundary insert + lock move): the lock is checked before the insert
    ("checkpoint: lock_from holds no lock", lambda w: w.cache.checkpoint([1, 2], w.out, lock_from=w.unlocked), rk.NotLocked),
    ("checkpoint: lock_from retired", lambda w: w.cache.checkpoint([1, 2], w.out, lock_from=w.stale), rk.StaleHandle),
    ("checkpoint: lock_from not a node", lambda w: w.cache.checkpoint([1, 2], w.out, lock_from=7), rk.InvalidArgument),
    ("checkpoint: fewer slots than tokens", lambda w: w.cache.checkpoint([1, 2, 3], w.out, lock_from=w.locked), rk.InvalidArgument),
    ("checkpoint: slot the tree holds", lambda w: w.cache.checkpoint([1, 2], [w.out[0], w.cached[0]]), rk.InvalidArgument),
    ("checkpoint: NaN priority", lambda w: w.cache.checkpoint([1, 2], w.out, priority=float("nan")), rk.InvalidArgument),
    ("checkpoint: negative boundary", lambda w: w.cache.checkpoint([1, 2], w.out, boundary=-1), rk.InvalidArgument),
    ("checkpoint: negative dup_from", lambda w: w.cache.checkpoint([1, 2], w.out, dup_from=-1), rk.InvalidArgument),
    ("checkpoint: negative inserted_len", lambda w: w.cache.checkpoint([1, 2], w.out, inserted_len=-1), rk.InvalidArgument),
    ("checkpoint: length past the tokens", lambda w: w.cache.checkpoint([1, 2], w.out + [w.out[0]], length=3), rk.InvalidArgument),
    ("checkpoint: length past the slots", lambda w: w.cache.checkpoint([1, 2, 3], w.out, length=3), rk.InvalidArgument),
    ("checkpoint: negative length", lambda w: w.cache.checkpoint([1, 2], w.out, length=-1), rk.InvalidArgument),
    ("checkpoint: length cuts to a bad token", lambda w: w.cache.checkpoint([1, -2, 3], w.out + [w.out[0]], length=2), rk.InvalidArgument),
    ("match_node: length past the tokens", lambda w: w.cache.match_node(array("q", [10, 11]), None, 3), rk.InvalidArgument),
    ("match_node: negative length", lambda w: w.cache.match_node([10, 11], length=-1), rk.InvalidArgument),
    # array.array ids: read in place (q, i) or converted (other integer typecodes)
    ("match_node: array('d')", lambda w: w.cache.match_node(array("d", [10.0, 11.0])), rk.InvalidArgument),
    ("match_node: array('q') id beyond int32 after a hit", lambda w: w.cache.match_node(array("q", [10, 11, 2**31])), rk.InvalidArgument),
    ("peek: array('q') negative id", lambda w: w.cache.peek_prefix(array("q", [10, -3])), rk.InvalidArgument),
    ("peek: array('i') negative id", lambda w: w.cache.peek_prefix(array("i", [10, -3])), rk.InvalidArgument),
    ("match_node: array('Q') id beyond int64", lambda w: w.cache.match_node(array("Q", [10, 2**63])), rk.InvalidArgument),
    ("match_node: array('u')", lambda w: w.cache.match_node(array("u", "ab")), rk.InvalidArgument),
    ("checkpoint: array('q') low half of a cached id, lock held", lambda w: w.cache.checkpoint(array("q", [10, 11, 12 + 2**32]), [w.cached[0], w.cached[1], w.out[0]], lock_from=w.locked), rk.InvalidArgument),
    ("path_slots: limit past the path", lambda w: w.cache.path_slots(w.locked, limit=5), rk.InvalidArgument),
    ("path_slots: negative limit", lambda w: w.cache.path_slots(w.locked, limit=-1), rk.InvalidArgument),
    # counts
    ("alloc: negative", lambda w: w.cache.alloc(-1), rk.InvalidArgument),
    ("evict: negative", lambda w: w.cache.evict(-3), rk.InvalidArgument),
    ("evict_slots: negative", lambda w: w.cache.evict_slots(-3), rk.InvalidArgument),
    # pool exhaustion: pool free + evictable is short, nothing may be evicted
    ("alloc: exhaustion", lambda w: w.cache.alloc(w.pool.available + w.cache.evictable_size + 1), rk.OutOfSlots),
    ("pool alloc: exhaustion", lambda w: w.pool.alloc(w.pool.available + 1), rk.OutOfSlots),
    # frees
    ("free: double free", lambda w: w.pool.free([w.out[0], w.out[0]]), rk.DoubleFree),
    ("free: slot the tree holds", lambda w: w.pool.free([w.out[0], w.cached[1]]), rk.DoubleFree),
    ("free: never allocated", lambda w: w.pool.free([15]), rk.DoubleFree),
    ("free: out of range", lambda w: w.pool.free([w.out[0], 16]), rk.InvalidArgument),
]
if torch is not None:
    CASES += [
        ("match: float tensor", lambda w: w.cache.match_prefix(torch.ones(3)), rk.InvalidArgument),
        ("insert: 2-D tensor", lambda w: w.cache.insert(torch.ones(2, 2, dtype=torch.int32), w.out), rk.InvalidArgument),
    ]


@pytest.mark.parametrize(("name", "call", "exc"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_changes_nothing(name: str, call: Callable[[World], Any], exc: type[Exception]) -> None:
    w = world()
    before = snapshot(w.cache)
    with pytest.raises(exc):
        call(w)
    assert snapshot(w.cache) == before, name
    w.cache.check()
    # The world still works: the handed-out slots insert, the locked path unlocks.
    w.cache.insert([1, 2], w.out)
    w.cache.unlock(w.locked)
    w.cache.check()


PAGED_CASES: list[tuple[str, Callable[[World], Any], type[Exception]]] = [
    ("alloc: not whole pages", lambda w: w.cache.alloc(3), rk.InvalidArgument),
    ("insert: slots not one whole page", lambda w: w.cache.insert([1] * 4, w.out[1:5]), rk.InvalidArgument),
    ("insert: page reversed", lambda w: w.cache.insert([1] * 4, w.out[3::-1]), rk.InvalidArgument),
    ("unlock: unlocked node", lambda w: w.cache.unlock(w.unlocked), rk.NotLocked),
    ("lock: retired handle", lambda w: w.cache.lock(w.stale), rk.StaleHandle),
]


@pytest.mark.parametrize(("name", "call", "exc"), PAGED_CASES, ids=[c[0] for c in PAGED_CASES])
def test_bad_input_changes_nothing_paged(name: str, call: Callable[[World], Any], exc: type[Exception]) -> None:
    w = world(page_size=4)
    before = snapshot(w.cache)
    with pytest.raises(exc):
        call(w)
    assert snapshot(w.cache) == before, name
    w.cache.check()


def test_every_error_is_a_radixkv_error() -> None:
    for _, _, exc in CASES:
        assert issubclass(exc, rk.RadixKVError)


@pytest.mark.parametrize("bad", [2**31, -2**31 - 1, 12 + 2**32, -7])
def test_int64_array_tokens_refused_as_lists_are(bad: int) -> None:
    """An int64 array is read in place (no narrowing up front); its bad ids get the error a
    list's get (the same message), from every call, after a hit as well as before one."""
    for toks in ([bad], [10, 11, bad], [10, 11, 12, 13, bad]):
        for call in ("match_node", "peek_prefix", "match_prefix"):
            w = world()
            f = getattr(w.cache, call)
            with pytest.raises(rk.InvalidArgument) as want:
                f(toks)
            with pytest.raises(rk.InvalidArgument) as got:
                f(np.array(toks, dtype=np.int64))
            assert str(got.value) == str(want.value), (call, toks)
        w = world()
        slots = (w.cached + w.out)[: len(toks) - 1] + [w.out[-1]]
        with pytest.raises(rk.InvalidArgument) as want:
            w.cache.checkpoint(toks, slots)
        with pytest.raises(rk.InvalidArgument) as got:
            w.cache.checkpoint(np.array(toks, dtype=np.int64), slots)
        assert str(got.value) == str(want.value), toks
        assert ("does not fit in int32" if bad != -7 else "negative token id -7") in str(got.value)
