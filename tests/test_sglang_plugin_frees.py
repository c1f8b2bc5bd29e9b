"""The SGLang plugin's parked duplicate frees (``_pending.PendingFrees``).

``checkpoint`` parks a row's duplicates of what another request inserted first instead of
freeing them one allocator call at a time. Checks: parked slots count as evictable (the idle
leak check holds without them in the allocator); a request that needs them gets them (SGLang's
``evict_from_tree_cache`` -> ``evict`` hands them over before any cached prefix goes); the bound
hands them over by itself; ``reset`` (alone, or as the scheduler's ``flush_cache``) loses none;
page size 16 hands over page ids, and an allocator without ``free_page_ids`` gets slot ids.
Skipped unless ``sglang`` is installed (``make sglang-deps``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sglang_env  # noqa: E402

_sglang_env.setup_test_module()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from radixkv.integrations.sglang._pending import BOUND_FRACTION, PendingFrees  # noqa: E402
from radixkv.integrations.sglang.cache import RadixKVPrefixCache  # noqa: E402

from _sglang_replay import Lifecycle  # noqa: E402


def _parked(lc: Lifecycle) -> int:
    return lc.cache.evictable_size() - lc.cache.tree.evictable_size


def _branch(lc: Lifecycle, out_len: int) -> tuple:
    """A runs with prompt P; B (P, A's output O, one more token) is admitted while A runs and
    inserts O first; A's finish then finds its own O slots duplicated: they are parked. B stays
    running, holding P + O locked. Returns (B, parked tokens)."""
    ps = lc.page_size
    prompt = list(range(100, 100 + 2 * ps + 1))
    out = list(range(5000, 5000 + out_len))
    a = lc.make_req("a", prompt, out_len)
    assert lc.admit(a, out_len)
    b = lc.make_req("b", prompt + out + [7], 2)
    assert lc.admit(b, 2)
    available = lc.alloc.available_size()
    lc.decode(a, out)
    # A checkpoints before it finishes (as a chunked prefill does): its row must read the
    # tree's slots, B's, where its own were duplicates
    a.refresh_fill_ids()
    lc.cache.checkpoint(a, up_to=a.kv.kv_committed_len)
    n = a.kv.cache_protected_len
    row_a = lc.r2t.req_to_token[a.kv.req_pool_idx, :n]
    assert n > len(prompt) and (row_a == lc.r2t.req_to_token[b.kv.req_pool_idx, :n]).all()
    assert (row_a.long() == lc.cache.path_device_indices(a.last_node)).all()
    lc.finish(a)
    lc.leak_check([b])
    parked = _parked(lc)
    assert parked > 0 and parked % ps == 0
    # nothing went to the allocator: A's row was the tree's (or parked) to the last page
    assert lc.alloc.available_size() == available
    return b, parked


@pytest.mark.parametrize("page_size", [1, 16])
def test_parked_duplicates_count_as_evictable_and_reach_a_request_that_needs_them(
        page_size: int) -> None:
    lc = Lifecycle(RadixKVPrefixCache, capacity=1024, max_running=4, max_context=1100,
                   page_size=page_size)
    b, parked = _branch(lc, out_len=48)
    assert parked == (47 if page_size == 1 else 48)
    assert parked <= lc.cache._frees.bound  # still parked, not handed over by the bound
    cached = lc.cache.tree.total_size
    # a request whose KV fits only with the parked slots: everything else the tree holds is
    # locked by B, so the eviction SGLang runs before allocating must hand over the parked ones
    free = lc.alloc.available_size()
    need = free + parked  # slots the new request allocates (prompt rest + decode)
    assert lc.cache.tree.evictable_size == 0
    c = lc.make_req("c", list(range(20000, 20000 + need)), 1)
    assert lc.admit(c, 1)
    assert _parked(lc) == 0 and lc.alloc.available_size() == 0
    # no cached prefix was lost for them: the tree grew by C's prompt alone
    assert lc.cache.tree.total_size == cached + need - need % page_size
    lc.leak_check([b, c])
    lc.cache.sanity_check()


def test_evict_hands_over_parked_slots_first_and_counts_them() -> None:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    lc = Lifecycle(RadixKVPrefixCache, capacity=1024, max_running=4, max_context=320)
    b, parked = _branch(lc, out_len=20)
    lc.decode(b, [1, 2])
    lc.finish(b)  # B's path is now evictable too
    tree_evictable = lc.cache.tree.evictable_size
    assert tree_evictable > 0
    available = lc.alloc.available_size()
    got = lc.cache.evict(EvictParams(num_tokens=1))
    assert got.num_tokens_evicted == parked
    assert lc.cache.tree.evictable_size == tree_evictable  # no leaf taken for one token
    assert lc.alloc.available_size() == available + parked
    # more than parked: the parked ones (none left) and then leaves, in one allocator call
    calls = []
    free = lc.alloc.free
    lc.alloc.free = lambda ids: (calls.append(len(ids)), free(ids))  # type: ignore[method-assign]
    got = lc.cache.evict(EvictParams(num_tokens=5))
    assert got.num_tokens_evicted >= 5 and calls == [got.num_tokens_evicted]
    lc.leak_check()


def test_bound_hands_parked_slots_over_without_an_evict() -> None:
    # capacity 512: bound 512 // 16 = 32 tokens; each branch parks 19 (its output less the
    # token not yet in the KV)
    lc = Lifecycle(RadixKVPrefixCache, capacity=512, max_running=6, max_context=200)
    assert lc.cache._frees.bound == 512 // BOUND_FRACTION == 32
    b1, first = _branch(lc, out_len=20)
    assert first == 19
    available = lc.alloc.available_size()
    # a second branch on another prompt parks 19 more: 38 > 32 hands all 38 over
    prompt = list(range(700, 740))
    out = list(range(8000, 8020))
    a = lc.make_req("a2", prompt, 20)
    assert lc.admit(a, 20)
    b2 = lc.make_req("b2", prompt + out + [7], 2)
    assert lc.admit(b2, 2)
    used = available - lc.alloc.available_size()
    lc.decode(a, out)
    lc.finish(a)
    assert _parked(lc) == 0
    assert lc.alloc.available_size() == available - used + first + 19
    lc.leak_check([b1, b2])


@pytest.mark.parametrize("page_size", [1, 16])
def test_reset_loses_no_parked_slot(page_size: int) -> None:
    lc = Lifecycle(RadixKVPrefixCache, capacity=1024, max_running=4, max_context=320,
                   page_size=page_size)
    b, parked = _branch(lc, out_len=48)
    lc.decode(b, [1, 2])
    lc.finish(b)
    lc.leak_check()
    available = lc.alloc.available_size()
    # reset alone (as SGLang's own cache tests call it): the parked slots reach the allocator;
    # the tree's own slots are dropped with it, as SGLang's RadixCache drops them
    lc.cache.reset()
    assert lc.alloc.available_size() == available + parked
    assert lc.cache.evictable_size() == 0 and lc.cache.protected_size() == 0
    lc.r2t.clear()
    lc.alloc.clear()
    # the scheduler's flush_cache: tree_cache.reset(), then the pools cleared
    b, parked = _branch(lc, out_len=48)
    lc.cache.reset()
    lc.r2t.clear()
    lc.alloc.clear()
    assert _parked(lc) == 0
    lc.leak_check()
    assert lc.alloc.available_size() == lc.total


class _SlotsOnly:
    """An allocator with ``free`` alone (no ``free_page_ids``)."""

    size = 64

    def __init__(self) -> None:
        self.freed: list = []

    def free(self, ids: torch.Tensor) -> None:
        self.freed.append(ids.tolist())


class _Paged(_SlotsOnly):
    def free_page_ids(self, ids: torch.Tensor) -> None:
        self.freed.append(("pages", ids.tolist()))


def test_pending_frees_hand_over_page_ids_or_slot_ids() -> None:
    # rows of slots 32..39 (pages 8 and 9 at page size 4) and 48..51 (page 12)
    paged, plain = _Paged(), _SlotsOnly()
    for alloc in (paged, plain):
        row = np.arange(32, 40, dtype=np.int32)
        frees = PendingFrees(alloc, 4, torch.device("cpu"))
        assert frees.bound == max(4, 64 // BOUND_FRACTION)
        frees.add_segment(row)
        row[:] = -1  # the caller rewrites its row: the parked copy must not change
        frees.add_segment(np.arange(48, 52, dtype=np.int64))
        frees.add_segment(np.arange(0, 0, dtype=np.int64))
        assert frees.tokens == 12
        assert frees.flush() == 12 and frees.tokens == 0 and frees.flush() == 0
    assert paged.freed == [("pages", [8, 9, 12])]
    assert plain.freed == [list(range(32, 40)) + list(range(48, 52))]
