"""RadixCache: every method, the golden case (docs/contract.md §2), pages, namespaces, handles
across splits."""

from __future__ import annotations

from array import array
from typing import Any, Callable

import numpy as np
import pytest

import radixkv as rk
from _radix_helpers import INPUT_KINDS, snapshot


def tok(s: str) -> list[int]:
    return [ord(c) for c in s]


def rows(cache: rk.RadixCache) -> list[tuple[list[int], list[int]]]:
    return [(path, value) for _, path, value, *_ in cache.dump()]


def test_golden_split() -> None:
    cache = rk.RadixCache(None)
    assert cache.insert(tok("ABCDEF"), [0, 1, 2, 3, 4, 5]) == 0
    c = cache.match_prefix(tok("ABCDEF")).node
    assert cache.insert(tok("ABCXYZ"), [0, 1, 2, 9, 10, 11]) == 3
    assert rows(cache) == [
        (tok("ABC"), [0, 1, 2]),
        (tok("ABCDEF"), [3, 4, 5]),
        (tok("ABCXYZ"), [9, 10, 11]),
    ]
    # C kept its identity as the lower half "DEF".
    assert c.length == 3 and c.depth == 6
    assert cache.path_slots(c).tolist() == [0, 1, 2, 3, 4, 5]
    assert cache.num_nodes == 4
    cache.check()


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_match_insert_peek_input_kinds(kind: Callable[[list[int]], Any]) -> None:
    pool = rk.TokenPool(32)
    cache = rk.RadixCache(pool)
    s = cache.alloc(5)
    assert cache.insert(kind([7, 8, 9, 10, 11]), kind(s.tolist())) == 0
    assert cache.peek_prefix(kind([7, 8, 9, 99])) == 3
    m = cache.match_prefix(kind([7, 8, 9, 99]))
    assert m.length == 3
    assert m.slots.dtype == np.int32 and m.slots.tolist() == s[:3].tolist()
    assert cache.total_size == 5 and cache.evictable_size == 5 and cache.protected_size == 0
    cache.check()


def test_peek_is_read_only() -> None:
    cache = rk.RadixCache(None)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    before = snapshot(cache)
    assert cache.peek_prefix([1, 2, 9]) == 2
    assert snapshot(cache) == before  # no split, no LRU / hit-count touch
    cache.match_prefix([1, 2, 9])
    assert snapshot(cache) != before


def test_match_touches_path_and_counts_hits() -> None:
    cache = rk.RadixCache(None)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    m1 = cache.match_prefix([1, 2, 3, 4])
    t1 = m1.node.last_access
    m2 = cache.match_prefix([1, 2, 3, 4])
    assert m2.node == m1.node and hash(m2.node) == hash(m1.node)
    assert m1.node.hit_count == 2 and m1.node.last_access > t1


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_match_node_is_match_prefix_without_slots(policy: str) -> None:
    # two caches fed the same calls, one matching with match_prefix, one with match_node:
    # same lengths, same nodes (by path), same tree after every call (splits, times, hits)
    a = rk.RadixCache(None, 2, policy=policy, sglang_stamps=True)
    b = rk.RadixCache(None, 2, policy=policy, sglang_stamps=True)
    for c in (a, b):
        c.insert([1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15])
        c.insert([1, 2, 7, 8], [10, 11, 16, 17], ("x", None))
    for q, ns in (([1, 2, 3, 4, 9, 9], None), ([1, 2, 3], None), ([5, 5], None),
                  ([1, 2, 7, 8, 1], ("x", None)), ([1, 2, 3, 4, 5, 6, 7], None)):
        m = a.match_prefix(q, ns)
        n, node = b.match_node(q, ns)
        assert n == m.length and node.depth == m.node.depth and node.is_root == m.node.is_root
        assert b.path_slots(node).tolist() == m.slots.tolist()
        assert snapshot(a) == snapshot(b)
    a.check()
    b.check()


@pytest.mark.parametrize("policy", ["lru", "priority", "slru"])
def test_checkpoint_is_its_calls_one_by_one(policy: str) -> None:
    # two caches fed the same requests' checkpoints, one through insert_node + the prompt
    # boundary's insert_node + lock / move_lock, one through checkpoint: same results, same
    # tree and events after every call; the duplicates returned are the tree's slots there
    kw = dict(policy=policy, events=True, slot_dtype="int64", sglang_stamps=True)
    a, b = rk.RadixCache(None, 2, **kw), rk.RadixCache(None, 2, **kw)
    locks: dict[str, tuple[Any, Any]] = {}
    dup_steps = 0
    # (request, tokens so far, slot base, prompt length, dup_from, inserted_len)
    steps = [("r1", [1, 2, 3, 4, 5, 6], 100, 4, 0, 0), ("r2", [1, 2, 3, 4, 7, 8], 200, 4, 0, 0),
             ("r1", [1, 2, 3, 4, 5, 6, 9, 9], 100, 4, 6, 6), ("r3", [1, 2, 7, 7], 300, 6, 0, 0),
             ("r2", [1, 2, 3, 4, 7, 8, 5, 5, 5, 5], 200, 4, 6, 6), ("r3", [1, 2, 7, 7, 8], 300, 6, 4, 4)]
    for rid, toks, base, prompt, dup_from, inserted in steps:
        slots = np.arange(base, base + len(toks), dtype=np.int64)
        old_a, old_b = locks.get(rid, (None, None))
        present, end_a = a.insert_node(toks, slots, priority=1.0, inserted_len=inserted)
        if 0 < prompt < len(toks):
            a.insert_node(toks[:prompt], slots[:prompt], priority=2.0, inserted_len=prompt)
        if old_a is None:
            a.lock(end_a)
        else:
            a.move_lock(old_a, end_a)
        p_b, end_b, dups = b.checkpoint(toks, slots, priority=1.0, inserted_len=inserted,
                                        boundary=prompt, lock_from=old_b, dup_from=dup_from)
        assert p_b == present and end_b.depth == end_a.depth
        if present > dup_from:
            dup_steps += 1
            assert dups is not None and dups.dtype == np.int64
            assert dups.tolist() == b.path_slots(end_b).tolist()[dup_from:present]
        else:
            assert dups is None
        assert snapshot(a) == snapshot(b), rid
        assert [repr(e) for e in a.take_events()] == [repr(e) for e in b.take_events()]
        assert (a.protected_size, a.evictable_size) == (b.protected_size, b.evictable_size)
        locks[rid] = (end_a, end_b)
        a.check()
        b.check()
    # r2's and r3's first checkpoints found r1's slots first: duplicates were returned
    assert dup_steps == 2
    for end_a, end_b in locks.values():
        a.unlock(end_a)
        b.unlock(end_b)
    assert a.protected_size == b.protected_size == 0


def test_path_slots_limit_is_a_prefix() -> None:
    cache = rk.RadixCache(None, slot_dtype="int64")
    cache.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    cache.insert([1, 2, 3, 9], [10, 11, 12, 19])
    node = cache.match_node([1, 2, 3, 4, 5])[1]
    full = cache.path_slots(node).tolist()
    for n in range(len(full) + 1):
        assert cache.path_slots(node, limit=n).tolist() == full[:n]
        assert cache.path_slots(node, limit=n, dtype="int32").dtype == np.int32


def test_empty_match_gives_root_handle() -> None:
    cache = rk.RadixCache(None)
    m = cache.match_prefix([1, 2, 3])
    assert m.length == 0 and m.slots.tolist() == [] and m.node.is_root
    cache.lock(m.node)
    cache.unlock(m.node)
    assert cache.path_slots(m.node).tolist() == []
    assert m.node == cache.root
    assert cache.protected_size == 0


def test_lock_unlock_sizes() -> None:
    cache = rk.RadixCache(None)
    cache.insert([1, 2, 3, 4], [0, 1, 2, 3])
    cache.insert([1, 2, 5], [0, 1, 9])
    m = cache.match_prefix([1, 2, 3, 4])
    cache.lock(m.node)
    cache.lock(m.node)
    assert m.node.lock_ref == 2
    assert (cache.protected_size, cache.evictable_size) == (4, 1)
    cache.unlock(m.node)
    cache.unlock(m.node)
    assert (cache.protected_size, cache.evictable_size) == (0, 5)
    with pytest.raises(rk.NotLocked):
        cache.unlock(m.node)
    cache.check()


def test_locked_handle_survives_other_requests_splits() -> None:
    cache = rk.RadixCache(None)
    cache.insert(list(range(100, 116)), list(range(16)))
    mine = cache.match_prefix(list(range(100, 116)))
    cache.lock(mine.node)
    # Other requests split the locked path three times, by matches and by inserts.
    cache.match_prefix(list(range(100, 108)))
    cache.insert(list(range(100, 104)) + [7, 7], [0, 1, 2, 3, 40, 41])
    cache.match_prefix(list(range(100, 112)) + [5])
    assert cache.num_nodes > 3
    assert mine.node.lock_ref == 1 and mine.node.depth == 16
    assert cache.path_slots(mine.node).tolist() == list(range(16))
    assert cache.protected_size == 16
    # Eviction cannot touch the locked path, only the other branch.
    assert cache.evict(100) == 2
    cache.unlock(mine.node)
    assert cache.protected_size == 0 and cache.evictable_size == 16
    assert cache.evict(100) == 16
    with pytest.raises(rk.StaleHandle):
        cache.lock(mine.node)
    cache.check()


def test_evict_lru_order_and_parent_promotion() -> None:
    cache = rk.RadixCache(None)
    cache.insert([1, 2], [10, 11])
    cache.insert([1, 2, 3], [10, 11, 12])
    cache.insert([1, 2, 4], [10, 11, 13])
    cache.insert([9], [19])
    cache.match_prefix([1, 2, 3])
    # LRU: leaf [..4] (t=3), then [9] (t=4), then [..3] (t=5), then [1,2] once it is a leaf.
    assert cache.evict_slots(1).tolist() == [13]
    assert cache.evict_slots(1).tolist() == [19]
    assert cache.evict_slots(2).tolist() == [12, 10, 11]
    assert cache.total_size == 0 and cache.num_nodes == 0
    assert cache.evict(5) == 0
    cache.check()


def test_alloc_evicts_when_short_and_refuses_without_change() -> None:
    pool = rk.TokenPool(8)
    cache = rk.RadixCache(pool)
    s = cache.alloc(6)
    cache.insert([1, 2, 3, 4, 5, 6], s)
    m = cache.match_prefix([1, 2, 3])
    cache.lock(m.node)
    before = snapshot(cache)
    with pytest.raises(rk.OutOfSlots):
        cache.alloc(6)  # 2 free + 3 evictable
    assert snapshot(cache) == before
    got = cache.alloc(5)
    assert len(got) == 5 and cache.total_size == 3 and pool.available == 0
    cache.check()


def test_caller_owned_slots() -> None:
    cache = rk.RadixCache(None, page_size=1)
    assert cache.pool is None
    cache.insert([1, 2, 3], [1_000_000, 5, 2_000_000_000])
    with pytest.raises(rk.InvalidArgument, match="no TokenPool"):
        cache.alloc(1)
    assert sorted(cache.evict_slots(3).tolist()) == [5, 1_000_000, 2_000_000_000]
    cache.check()


def test_evict_slots_with_pool_returns_ids_already_freed() -> None:
    pool = rk.TokenPool(4)
    cache = rk.RadixCache(pool)
    s = cache.alloc(4)
    cache.insert([1, 2, 3, 4], s)
    assert pool.available == 0
    assert sorted(cache.evict_slots(1).tolist()) == sorted(s.tolist())
    assert pool.available == 4


def test_namespaces_never_share() -> None:
    cache = rk.RadixCache(None)
    spaces: list[Any] = [None, "", "a", ("bc", "a"), ("b", "ca"), ("x", None), (None, "x"), ()]
    for i, ns in enumerate(spaces):
        assert cache.insert([1, 2, 3], [10 * i, 10 * i + 1, 10 * i + 2], namespace=ns) == 0
    for i, ns in enumerate(spaces):
        m = cache.match_prefix([1, 2, 3], namespace=ns)
        assert m.slots.tolist() == [10 * i, 10 * i + 1, 10 * i + 2]
    assert cache.peek_prefix([1, 2, 3], namespace="zzz") == 0
    assert cache.total_size == 3 * len(spaces)
    cache.check()
    # Namespace roots go away with their last token.
    cache.evict(1000)
    assert cache.num_nodes == 0
    with pytest.raises(rk.InvalidArgument, match="namespace"):
        cache.match_prefix([1], namespace=3)
    with pytest.raises(rk.InvalidArgument, match="namespace"):
        cache.insert([1], [1], namespace=("a", 1))


def test_page_size_whole_pages_and_partial_tail() -> None:
    pool = rk.TokenPool(32, page_size=4)
    cache = rk.RadixCache(pool)
    assert cache.page_size == 4
    s = cache.alloc(12)
    toks = list(range(100, 110))  # 2 whole pages + a 2-token tail
    assert cache.insert(toks, s[:10]) == 0
    assert cache.total_size == 8  # the tail page is not cached
    assert pool.num_out == 4  # s[8:12]: the tail slots stay the caller's
    pool.free(s[8:])
    assert cache.peek_prefix(toks) == 8
    assert cache.peek_prefix(toks[:7]) == 4
    m = cache.match_prefix(toks[:6] + [0, 0])  # diverges inside page 2
    assert m.length == 4 and m.slots.tolist() == s[:4].tolist()
    # A sibling with the same first token but a different first page.
    s2 = cache.alloc(4)
    assert cache.insert([100, 1, 2, 3], s2) == 0
    assert cache.peek_prefix([100, 1, 2, 3, 4]) == 4
    cache.check()
    # Slots that are not one whole pool page are refused.
    s3 = pool.alloc(4)
    with pytest.raises(rk.InvalidArgument, match="whole pool page"):
        cache.insert([5, 5, 5, 5], s3[::-1].copy())
    cache.check()


def test_page_size_caller_owned() -> None:
    cache = rk.RadixCache(None, page_size=2)
    assert cache.insert([1, 2, 3], [7, 8, 9]) == 0
    assert cache.total_size == 2
    assert cache.insert([1, 2, 3, 4, 5], [0, 0, 11, 12, 13]) == 2
    assert cache.match_prefix([1, 2, 3, 4, 5]).slots.tolist() == [7, 8, 11, 12]
    cache.check()


def test_page_size_must_agree_with_pool() -> None:
    with pytest.raises(rk.InvalidArgument):
        rk.RadixCache(rk.TokenPool(8, 2), page_size=4)
    assert rk.RadixCache(rk.TokenPool(8, 2), page_size=2).page_size == 2


def test_node_of_another_cache_is_refused() -> None:
    a, b = rk.RadixCache(None), rk.RadixCache(None)
    a.insert([1], [1])
    n = a.match_prefix([1]).node
    with pytest.raises(rk.InvalidArgument, match="another RadixCache"):
        b.lock(n)
    with pytest.raises(rk.InvalidArgument):
        a.lock("not a node")  # type: ignore[arg-type]


def test_long_prompt_releases_gil_and_matches() -> None:
    n = 32768
    pool = rk.TokenPool(2 * n)
    cache = rk.RadixCache(pool)
    toks = np.arange(n, dtype=np.int32)
    s = cache.alloc(n)
    cache.insert(toks, s)
    m = cache.match_prefix(toks)
    assert m.length == n and np.array_equal(m.slots, s)
    cache.check()


def test_repr() -> None:
    pool = rk.TokenPool(4)
    cache = rk.RadixCache(pool)
    assert "TokenPool" in repr(pool) and "RadixCache" in repr(cache)
    assert "root" in repr(cache.root)
    cache.insert([1], cache.alloc(1))
    m = cache.match_prefix([1])
    assert "Match(length=1)" == repr(m) and "Node(" in repr(m.node)


def test_insert_node_returns_the_path_end() -> None:
    pool = rk.TokenPool(64)
    cache = rk.RadixCache(pool)
    s = cache.alloc(6)
    present, node = cache.insert_node(tok("ABCDEF"), s)
    assert present == 0 and node.depth == 6 and node.length == 6
    assert node == cache.match_prefix(tok("ABCDEF")).node
    assert cache.path_slots(node).tolist() == s.tolist()
    # Already present and ending inside a node: split there, as match_prefix does.
    before = rows(cache)
    present, mid = cache.insert_node(tok("ABC"), s[:3])
    assert present == 3 and mid.depth == 3 and mid.length == 3
    assert mid == cache.match_prefix(tok("ABC")).node
    assert [p for p, _ in rows(cache)] == [tok("ABC"), tok("ABCDEF")] != [p for p, _ in before]
    # An extension: the new leaf is the end.
    t = cache.alloc(2)
    present, leaf = cache.insert_node(tok("ABCDEFGH"), np.concatenate([s, t]))
    assert present == 6 and leaf.depth == 8 and leaf.length == 2
    assert cache.path_slots(leaf).tolist() == s.tolist() + t.tolist()
    # Nothing to insert: the root handle.
    assert cache.insert_node([], [])[1].is_root
    cache.check()


def test_insert_node_handle_survives_later_splits_and_locks() -> None:
    pool = rk.TokenPool(64)
    cache = rk.RadixCache(pool)
    s = cache.alloc(8)
    _, node = cache.insert_node(tok("ABCDEFGH"), s)
    cache.lock(node)
    u = cache.alloc(2)
    assert cache.insert(tok("ABZZ"), np.concatenate([s[:2], u])) == 2  # splits node at 2
    cache.match_prefix(tok("ABCD"))  # splits it again at 4
    assert node.depth == 8 and node.length == 4 and node.lock_ref == 1
    assert cache.path_slots(node).tolist() == s.tolist()
    assert cache.protected_size == 8
    cache.unlock(node)
    assert cache.protected_size == 0
    cache.check()


def test_insert_node_agrees_with_insert_then_match() -> None:
    """Same tree (dump minus access times and hit counts) as insert + match_prefix."""
    seqs = [tok("ABCDEF"), tok("ABCXYZ"), tok("AB"), tok("ABCDEFGH"), tok("QRS"), tok("ABCX")]
    a, b = rk.RadixCache(None), rk.RadixCache(None)
    for i, q in enumerate(seqs):
        slots = [100 * i + k for k in range(len(q))]
        pa = a.insert(q, slots)
        na = a.match_prefix(q).node
        pb, nb = b.insert_node(q, slots)
        assert pa == pb and na.depth == nb.depth == len(q)
        assert a.path_slots(na).tolist() == b.path_slots(nb).tolist()
    assert [r[:4] for r in a.dump()] == [r[:4] for r in b.dump()]
    b.check()


def test_insert_node_pages() -> None:
    pool = rk.TokenPool(32, page_size=4)
    cache = rk.RadixCache(pool)
    s = cache.alloc(12)
    # 10 tokens: two whole pages go in, the partial last page stays the caller's.
    present, node = cache.insert_node(list(range(1, 11)), s[:10])
    assert present == 0 and node.depth == 8
    assert cache.path_slots(node).tolist() == s[:8].tolist()
    # Present up to inside the node, at a page boundary: split at 4.
    present, mid = cache.insert_node(list(range(1, 7)), s[:6])
    assert present == 4 and mid.depth == 4 and node.length == 4
    # Fewer tokens than a page: nothing inserted, the root.
    present, root = cache.insert_node([1, 2, 3], s[:3])
    assert present == 0 and root.is_root
    # Slots that are not whole pool pages are refused, and nothing changes.
    before = snapshot(cache)
    with pytest.raises(rk.InvalidArgument, match="whole pool page"):
        cache.insert_node(list(range(1, 13)), np.concatenate([s[:8], s[9:12], s[8:9]]))
    assert snapshot(cache) == before
    cache.check()


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_insert_node_input_kinds_and_bad_input(kind: Callable[[list[int]], Any]) -> None:
    pool = rk.TokenPool(16)
    cache = rk.RadixCache(pool)
    s = cache.alloc(3).tolist()
    before = snapshot(cache)
    with pytest.raises(rk.InvalidArgument, match="negative token"):
        cache.insert_node(kind([1, -2, 3]), kind(s))
    with pytest.raises(rk.InvalidArgument, match="out of range"):
        cache.insert_node(kind([1, 2, 3]), kind([s[0], s[1], 16]))
    with pytest.raises(rk.InvalidArgument, match="tokens but"):
        cache.insert_node(kind([1, 2]), kind(s))
    assert snapshot(cache) == before
    present, node = cache.insert_node(kind([1, 2, 3]), kind(s))
    assert present == 0 and node.depth == 3
    cache.check()


def test_evicted_tokens_counts_evict_and_alloc() -> None:
    pool = rk.TokenPool(8)
    cache = rk.RadixCache(pool)
    cache.insert([1, 2, 3], cache.alloc(3))
    cache.insert([4, 5, 6, 7], cache.alloc(4))
    assert cache.evicted_tokens == 0
    assert cache.evict(1) == 3  # whole LRU leaf
    assert cache.evicted_tokens == 3
    s = cache.alloc(8)  # 4 free, evicts the other leaf
    assert len(s) == 8 and cache.evicted_tokens == 7 and cache.total_size == 0
    with pytest.raises(rk.OutOfSlots):
        cache.alloc(1)
    assert cache.evicted_tokens == 7
    cache.check()


def test_move_lock_is_lock_then_unlock() -> None:
    pool = rk.TokenPool(32)
    cache = rk.RadixCache(pool)
    s = cache.alloc(8)
    _, prompt = cache.insert_node([1, 2, 3, 4, 5], s[:5])
    cache.lock(prompt)
    assert cache.protected_size == 5
    present, full = cache.insert_node([1, 2, 3, 4, 5, 6, 7, 8], s)
    assert present == 5
    cache.move_lock(prompt, full)
    assert (full.lock_ref, prompt.lock_ref, cache.protected_size) == (1, 1, 8)
    with pytest.raises(rk.NotLocked):
        cache.unlock(prompt)  # the lock moved: none is left through this handle
    # Refused (nothing to release through `prompt`): nothing changes.
    before = snapshot(cache)
    with pytest.raises(rk.NotLocked):
        cache.move_lock(prompt, full)
    assert snapshot(cache) == before
    # To the root: a plain release.
    cache.move_lock(full, cache.root)
    assert cache.protected_size == 0 and cache.evictable_size == 8
    cache.check()


def test_move_lock_across_branches_and_namespaces() -> None:
    cache = rk.RadixCache(None)
    _, a = cache.insert_node([1, 2, 3, 4], [10, 11, 12, 13])
    _, b = cache.insert_node([1, 2, 9, 9], [10, 11, 22, 23])
    _, c = cache.insert_node([1, 2], [10, 11], namespace="other")
    cache.lock(a)
    cache.move_lock(a, b)  # siblings under [1, 2]
    assert (a.lock_ref, b.lock_ref, cache.protected_size) == (0, 1, 4)
    cache.move_lock(b, c)
    assert (b.lock_ref, c.lock_ref, cache.protected_size) == (0, 1, 2)
    other = rk.RadixCache(None)
    with pytest.raises(rk.InvalidArgument, match="another RadixCache"):
        cache.move_lock(c, other.root)
    cache.unlock(c)
    assert cache.protected_size == 0
    cache.check()


def test_match_prefix_writes_into_out() -> None:
    pool = rk.TokenPool(32)
    cache = rk.RadixCache(pool)
    s = cache.alloc(6)
    cache.insert([1, 2, 3, 4, 5, 6], s)
    row = np.full(10, -7, dtype=np.int32)
    m = cache.match_prefix([1, 2, 3, 9], out=row)
    assert m.length == 3 and row[:3].tolist() == s[:3].tolist() and row[3:].tolist() == [-7] * 7
    assert m.slots.tolist() == s[:3].tolist() and np.shares_memory(m.slots, row)
    assert m.node.depth == 3  # the match split the node, as without out
    # Nothing matched: nothing written.
    assert cache.match_prefix([8, 8], out=row).length == 0 and row[0] == s[0]
    # Refused before anything changes: too short, wrong dtype, read-only, not contiguous.
    before = snapshot(cache)
    ro = np.zeros(10, np.int32)
    ro.flags.writeable = False
    for bad in (np.zeros(3, np.int32), np.zeros(10, np.int16), ro, np.zeros(20, np.int32)[::2]):
        with pytest.raises(rk.InvalidArgument, match="out"):
            cache.match_prefix([1, 2, 3, 4, 5], out=bad)
    assert snapshot(cache) == before
    cache.check()


def test_alloc_writes_into_out() -> None:
    pool = rk.TokenPool(8)
    cache = rk.RadixCache(pool)
    row = np.full(6, -1, dtype=np.int32)
    got = cache.alloc(4, out=row[1:5])
    assert got.tolist() == row[1:5].tolist() == [0, 1, 2, 3] and np.shares_memory(got, row)
    assert row[0] == -1 and row[5] == -1
    cache.insert([1, 2, 3, 4], row[1:5])
    # Short pool: evicts into the buffer; a longer buffer gets a view of its first n.
    big = np.full(10, -1, dtype=np.int32)
    got = cache.alloc(6, out=big)
    assert len(got) == 6 and np.shares_memory(got, big) and big[6:].tolist() == [-1] * 4
    assert all(0 <= x < 8 for x in got.tolist())
    assert len(set(got.tolist())) == 6 and cache.evicted_tokens == 4
    # Failure (and a bad out) write and change nothing.
    before, snap = big.copy(), snapshot(cache)
    with pytest.raises(rk.OutOfSlots):
        cache.alloc(4, out=big)
    with pytest.raises(rk.InvalidArgument, match="out"):
        cache.alloc(2, out=np.zeros(1, np.int32))
    assert big.tolist() == before.tolist() and snapshot(cache) == snap
    pool.free(got)
    cache.check()


def test_event_hashes_are_signed_64_bit() -> None:
    # SGLang publishes block hashes as signed int64 (its hash_str_to_int64); radixkv's events
    # carry the same bits that way: every hash in range, and (64 pages of uniform hashes) some
    # negative, with the chain's parent links equal to the signed hashes they point at
    cache = rk.RadixCache(None, 1, events=True)
    for i in range(64):
        cache.insert([i, 1000 + i], [2 * i, 2 * i + 1])
    stored = [e for e in cache.take_events() if isinstance(e, rk.BlockStored)]
    hashes = [h for e in stored for h in e.block_hashes]
    assert len(hashes) == 128
    assert all(-(2**63) <= h < 2**63 for h in hashes)
    assert any(h < 0 for h in hashes) and any(h >= 0 for h in hashes)
    cache.insert([0, 1000, 7], [0, 1, 200])
    (ev,) = cache.take_events()
    assert ev.parent_block_hash == stored[0].block_hashes[-1]
    cache.evict(10**6)
    removed = [h for e in cache.take_events() if isinstance(e, rk.BlockRemoved)
               for h in e.block_hashes]
    assert sorted(removed) == sorted(hashes + ev.block_hashes)


@pytest.mark.parametrize("typecode", ["q", "i", "l", "h", "Q"])
def test_array_ids_and_length_equal_cut_numpy_ids(typecode: str) -> None:
    # two caches fed the same random requests: one with array.array ids (read in place for q,
    # i and l; converted for h, Q) and whole rows cut by checkpoint's length, one with int64
    # NumPy ids cut by the caller; same results, same tree after every call
    rng = np.random.default_rng(7)
    kw = dict(events=True, slot_dtype="int64", sglang_stamps=True)
    a, b = rk.RadixCache(None, 2, **kw), rk.RadixCache(None, 2, **kw)
    table = np.zeros((4, 64), dtype=np.int32)
    locks: dict[int, tuple[Any, Any]] = {}
    next_slot = 1
    prompts = [rng.integers(0, 5, rng.integers(1, 12)).tolist() for _ in range(6)]
    for step in range(60):
        r = int(rng.integers(0, 4))
        toks = prompts[int(rng.integers(0, len(prompts)))] + rng.integers(0, 5, rng.integers(0, 20)).tolist()
        ids = array(typecode, toks)
        full = np.array(toks, dtype=np.int64)
        n = int(rng.integers(0, len(toks) + 1))
        # match: the whole array, a cut one, or the whole one cut by length
        if step % 3 == 2:
            got_a = a.match_node(ids, None, n)
        else:
            got_a = a.match_node(ids if n == len(toks) else array(typecode, toks[:n]))
        got_b = b.match_node(full[:n])
        assert got_a[0] == got_b[0] and got_a[1].depth == got_b[1].depth
        assert a.peek_prefix(ids) == b.peek_prefix(full)
        # checkpoint request r's first n tokens with fresh slots past what is cached
        if r in locks:
            la, lb = locks.pop(r)
            a.unlock(la)
            b.unlock(lb)
        m = n - n % 2
        table[r, :m] = np.arange(next_slot, next_slot + m)
        next_slot += m
        pa, ea, da = a.checkpoint(ids, table[r], None, 0.0, 0, 0, None, 0, True, m)
        pb, eb, db = b.checkpoint(full[:m], table[r, :m].copy(), None, 0.0, 0, 0, None, 0, True)
        assert pa == pb and ea.depth == eb.depth
        assert (da is None) == (db is None) and (da is None or da.tolist() == db.tolist())
        locks[r] = (ea, eb)
        assert snapshot(a) == snapshot(b), step
        assert [repr(e) for e in a.take_events()] == [repr(e) for e in b.take_events()]
        a.check()
        b.check()


def test_growing_array_ids_are_read_afresh_each_call() -> None:
    # SGLang appends each output token to the request's array('q'), which may move its buffer:
    # every call reads the array where it is now (checkpoints of one growing request equal
    # those of fresh int64 copies)
    kw = dict(slot_dtype="int64", sglang_stamps=True)
    a, b = rk.RadixCache(None, **kw), rk.RadixCache(None, **kw)
    ids = array("q", [5, 6, 7])
    row = np.arange(1, 4001, dtype=np.int32)
    la = lb = None
    for step in range(40):
        ids.extend(range(100 * step, 100 * step + 97))  # grows past several reallocations
        n = len(ids)
        pa, ea, _ = a.checkpoint(ids, row, None, 0.0, 0, 0, la, 0, True, n)
        pb, eb, _ = b.checkpoint(np.array(ids, dtype=np.int64), row[:n].copy(), lock_from=lb)
        assert (pa, ea.depth) == (pb, eb.depth) == (0 if step == 0 else n - 97, n)
        assert a.peek_prefix(ids) == b.peek_prefix(np.array(ids, dtype=np.int64)) == n
        la, lb = ea, eb
    assert snapshot(a) == snapshot(b)
    a.check()


@pytest.mark.parametrize("typecode", ["q", "i", "l", "L", "H"])
def test_array_ids_are_taken_wherever_ids_are(typecode: str) -> None:
    # match_prefix, insert and slot arguments take array.array too (copied; checked as lists)
    kw = dict(slot_dtype="int64")
    a, b = rk.RadixCache(None, **kw), rk.RadixCache(None, **kw)
    toks, slots = [3, 1, 4, 1, 5, 9, 2, 6], [10, 11, 12, 13, 14, 15, 16, 17]
    assert a.insert(array(typecode, toks), array(typecode, slots)) == b.insert(toks, slots) == 0
    ma, mb = a.match_prefix(array(typecode, toks[:5] + [7])), b.match_prefix(toks[:5] + [7])
    assert (ma.length, ma.slots.tolist()) == (mb.length, mb.slots.tolist()) == (5, slots[:5])
    pa, na = a.insert_node(array(typecode, toks + [8]), array(typecode, slots + [18]))
    pb, nb = b.insert_node(toks + [8], slots + [18])
    assert (pa, na.depth) == (pb, nb.depth) == (8, 9)
    assert snapshot(a) == snapshot(b)


def test_array_slot_ids_keep_int64_range() -> None:
    # unsigned 8-byte arrays are converted with the slot rules: ids up to 2**63 - 1 pass, above
    # it the call is refused naming the value, nothing changed
    c = rk.RadixCache(None, slot_dtype="int64")
    big = 2**62 + 5
    c.insert([1, 2], array("Q", [big, big + 1]))
    assert c.match_prefix([1, 2]).slots.tolist() == [big, big + 1]
    before = snapshot(c)
    with pytest.raises(rk.InvalidArgument, match="does not fit int64"):
        c.insert([7, 8], array("Q", [1, 2**63]))
    with pytest.raises(rk.InvalidArgument, match="typecode 'd'"):
        c.insert(array("d", [7.0, 8.0]), [1, 2])
    assert snapshot(c) == before
    c.check()
