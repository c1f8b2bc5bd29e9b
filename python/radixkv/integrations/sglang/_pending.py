"""Slots the plugin has let go of but not yet handed to SGLang's allocator.

SGLang's CPU ``TokenToKVPoolAllocator.free`` concatenates onto its free list, a copy of the whole
list per call, so its cost is about the same for one slot as for thousands. ``checkpoint`` frees
a row's duplicates of what another request inserted first on many requests of a branching trace;
one allocator call per checkpoint made that copy the largest cost of the whole cache. The plugin
parks those slots here instead and hands them over in one call when SGLang asks the cache for
room (``evict``), when the buffer passes its bound, or on ``reset``.

Parked slots are free for the taking, so the cache counts them as evictable: SGLang's admission
(available + evictable) and its idle leak check (available + evictable + protected == total)
see the same numbers as with an immediate free.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np
import numpy.typing as npt
import torch

from ._slots import slots_to_device

# The buffer's bound as a fraction of the pool: a hand-over copies the allocator's free list
# once (at most the pool), so with a bound of pool / 16 that copy costs at most ~16 ids per
# parked slot whatever the pool's size, while at most 1/16 of the pool sits outside the
# allocator's own count (what SGLang's usage metrics, which read the allocator, lag by).
BOUND_FRACTION = 16


class PendingFrees:
    """Host copies of freed KV slots (or page ids), handed to ``allocator`` in one call.

    ``page_size == 1``: slot ids, handed over with ``allocator.free``. ``page_size > 1``: the
    page ids of page-aligned segments (one id per page, what SGLang's ``free_segment`` derives
    from a segment), handed over with ``allocator.free_page_ids``; an allocator without that
    call gets the segments' slot ids through ``free``, which finds their pages itself."""

    def __init__(self, allocator: Any, page_size: int, device: torch.device) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.device = device
        self._by_page = page_size > 1 and hasattr(allocator, "free_page_ids")
        self._parts: List[npt.NDArray[np.int64]] = []
        self.tokens = 0  # parked KV tokens (pages count page_size each)
        size = int(getattr(allocator, "size", 0) or 0)
        self.bound = max(page_size, size // BOUND_FRACTION)

    def add_segment(self, row: npt.NDArray[np.signedinteger]) -> None:
        """Park ``row``: slots in whole pages, each page's slots consecutive from its first
        (a row segment that starts on a page boundary, or leaves the tree evicted); copied,
        as the caller may rewrite the row next."""
        n = len(row)
        if n == 0:
            return
        if self._by_page:
            ps = self.page_size
            self._parts.append(row[::ps].astype(np.int64) // ps)
            self.tokens += -(-n // ps) * ps
        else:
            self._parts.append(row.astype(np.int64))  # astype copies, as the row is reused
            self.tokens += n

    def add_owned(self, ids: npt.NDArray[np.int64]) -> None:
        """Park int64 slot ids the caller hands over and never touches again (no copy); page
        size 1 only, where a slot id is what the allocator takes."""
        assert not self._by_page
        self._parts.append(ids)
        self.tokens += len(ids)

    def flush(self) -> int:
        """Hand every parked slot to the allocator in one call; the tokens handed over."""
        n = self.tokens
        if n == 0:
            return 0
        parts, self._parts, self.tokens = self._parts, [], 0
        # a fresh array each time: SGLang's paged allocator may keep the tensor it is given
        ids = slots_to_device(parts[0] if len(parts) == 1 else np.concatenate(parts),
                              self.device)
        if self._by_page:
            self.allocator.free_page_ids(ids)
        else:
            self.allocator.free(ids)
        return n
