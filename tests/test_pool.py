"""TokenPool: allocation in pages, frees, and rejection of bad frees with nothing changed."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import radixkv as rk
from _radix_helpers import INPUT_KINDS


def test_alloc_free_available() -> None:
    pool = rk.TokenPool(8)
    assert (pool.num_slots, pool.page_size, pool.available) == (8, 1, 8)
    a = pool.alloc(3)
    assert a.dtype == np.int32 and a.tolist() == [0, 1, 2]
    assert pool.available == 5 and pool.num_out == 3
    pool.free(a[:2])
    assert pool.available == 7 and pool.num_out == 1
    assert pool.alloc(0).tolist() == []
    pool.check()


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_free_accepts_every_input_kind(kind: Callable[[list[int]], Any]) -> None:
    pool = rk.TokenPool(4)
    a = pool.alloc(4).tolist()
    pool.free(kind(a))
    assert pool.available == 4


def test_pages_are_whole() -> None:
    pool = rk.TokenPool(12, page_size=4)
    with pytest.raises(rk.InvalidArgument, match="multiple of page_size"):
        pool.alloc(3)
    a = pool.alloc(8)
    assert a.tolist() == list(range(8))
    # A page comes back only when all its slots are free again.
    pool.free(a[:3])
    assert pool.available == 4
    pool.free(a[3:4])
    assert pool.available == 8
    pool.check()


def test_exhaustion() -> None:
    pool = rk.TokenPool(4)
    pool.alloc(3)
    with pytest.raises(rk.OutOfSlots):
        pool.alloc(2)
    assert pool.available == 1


@pytest.mark.parametrize(
    ("bad", "exc"),
    [
        ("double", rk.DoubleFree),
        ("twice_in_call", rk.DoubleFree),
        ("never_allocated", rk.DoubleFree),
        ("out_of_range", rk.InvalidArgument),
        ("negative", rk.InvalidArgument),
        ("float", rk.InvalidArgument),
        ("string", rk.InvalidArgument),
    ],
)
def test_bad_free_changes_nothing(bad: str, exc: type[Exception]) -> None:
    pool = rk.TokenPool(8)
    a = pool.alloc(4).tolist()
    pool.free([a[0]])
    args: dict[str, Any] = {
        "double": [a[1], a[0]],
        "twice_in_call": [a[1], a[2], a[1]],
        "never_allocated": [a[1], 7],
        "out_of_range": [a[1], 8],
        "negative": [a[1], -1],
        "float": [1.5],
        "string": "abc",
    }
    before = (pool.available, pool.num_out)
    with pytest.raises(exc):
        pool.free(args[bad])
    assert (pool.available, pool.num_out) == before
    pool.check()
    pool.free(a[1:])  # everything still freeable once


def test_freeing_cached_slots_is_refused() -> None:
    pool = rk.TokenPool(8)
    cache = rk.RadixCache(pool)
    s = cache.alloc(3)
    cache.insert([1, 2, 3], s)
    with pytest.raises(rk.DoubleFree, match="radix cache"):
        pool.free(s[:1])
    assert (pool.num_cached, pool.available) == (3, 5)
    cache.check()


@pytest.mark.parametrize(("num_slots", "page_size"), [(0, 1), (10, 4), (-1, 1), (8, 0), (8, -2)])
def test_bad_construction(num_slots: int, page_size: int) -> None:
    with pytest.raises(rk.InvalidArgument):
        rk.TokenPool(num_slots, page_size)


def test_negative_alloc() -> None:
    with pytest.raises(rk.InvalidArgument):
        rk.TokenPool(4).alloc(-1)


def test_one_cache_per_pool() -> None:
    pool = rk.TokenPool(4)
    cache = rk.RadixCache(pool)
    with pytest.raises(rk.InvalidArgument, match="another RadixCache"):
        rk.RadixCache(pool)
    cache.insert([5, 6], cache.alloc(2))
    del cache  # dropping the cache gives its slots back and frees the pool for another
    assert pool.available == 4
    rk.RadixCache(pool).check()


@pytest.mark.parametrize("page_size", [1, 4])
def test_eviction_returns_slots_in_bulk_and_reuses_them(page_size: int) -> None:
    pool = rk.TokenPool(64, page_size)
    cache = rk.RadixCache(pool)
    for i in range(4):
        cache.insert(list(range(100 * i, 100 * i + 16)), cache.alloc(16))
    assert pool.available == 0 and pool.num_cached == 64
    freed = cache.evict_slots(32)
    assert sorted(freed.tolist()) == sorted(set(freed.tolist())) and len(freed) == 32
    assert pool.available == 32 and pool.num_cached == 32
    pool.check()
    again = pool.alloc(32)
    assert sorted(again.tolist()) == sorted(freed.tolist())
    pool.free(again)
    cache.check()


def test_alloc_order_is_ascending_then_lifo() -> None:
    pool = rk.TokenPool(8)
    a = pool.alloc(3)
    assert a.tolist() == [0, 1, 2]
    pool.free(a[::-1].copy())  # freed 2, 1, 0: the last freed comes back first
    assert pool.alloc(4).tolist() == [0, 1, 2, 3]
    pool.check()
