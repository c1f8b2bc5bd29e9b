"""Shared helpers of the radix / pool tests: input-type variants and a whole-state snapshot."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import radixkv as rk

try:
    import torch
except ImportError:  # torch is optional for the core
    torch = None


def as_list(x: list[int]) -> Any:
    return list(x)


def as_np32(x: list[int]) -> Any:
    return np.asarray(x, dtype=np.int32)


def as_np64(x: list[int]) -> Any:
    return np.asarray(x, dtype=np.int64)


def as_np32_strided(x: list[int]) -> Any:
    """A non-contiguous int32 view (every other element of a twice-as-long array)."""
    full = np.zeros(2 * len(x), dtype=np.int32)
    full[::2] = x
    view = full[::2]
    assert not view.flags.c_contiguous or len(x) <= 1
    return view


def as_tuple(x: list[int]) -> Any:
    return tuple(x)


def as_torch(x: list[int]) -> Any:
    assert torch is not None
    return torch.tensor(x, dtype=torch.int64)


INPUT_KINDS: list[Callable[[list[int]], Any]] = [as_list, as_tuple, as_np32, as_np32_strided, as_np64]
if torch is not None:
    INPUT_KINDS.append(as_torch)


def snapshot(cache: rk.RadixCache) -> tuple[Any, ...]:
    """Everything observable about a cache and its pool; equal snapshots mean nothing changed."""
    pool = cache.pool
    pool_state = (
        None if pool is None else (pool.available, pool.num_out, pool.num_cached)
    )
    return (
        cache.dump(),
        cache.total_size,
        cache.evictable_size,
        cache.protected_size,
        cache.num_nodes,
        pool_state,
    )


def draw_shared_prefix(data: Any, history: list[list[int]], max_tail: int, max_len: int) -> list[int]:
    """A key that extends or branches from an earlier one: a drawn prefix of a key drawn from
    ``history`` plus up to ``max_tail`` tokens in 0-2, cut to ``max_len``; appended to
    ``history``. ``data`` is hypothesis' ``st.data()``."""
    import hypothesis.strategies as st  # noqa: PLC0415  (only the stateful tests draw)

    base = data.draw(st.sampled_from(history), label="base")
    keep = data.draw(st.integers(0, len(base)), label="keep")
    tail = data.draw(st.lists(st.integers(0, 2), max_size=max_tail), label="tail")
    toks = (base[:keep] + tail)[:max_len]
    history.append(toks)
    return toks
