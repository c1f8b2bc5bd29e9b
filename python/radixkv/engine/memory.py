"""The KV pages of every sequence: one ``TokenPool(num_slots, page_size)`` under one ``RadixCache``.

The lifecycle SGLang uses, in whole pages: match and lock the cached prefix (capped one token
short of what must be computed, so the last token yields logits), allocate pages as positions
need them (``RadixCache.alloc`` evicts LRU unlocked leaves when the pool is short), publish each
finished prefill chunk's whole pages to the tree and move the lock to their end, and on finish
or preemption insert every whole page with KV, free the pages that turned out to be duplicates
and the partial last page, and unlock. A preempted sequence's pages thus stay in the tree,
unlocked, and its re-admission hits them unless eviction took them meanwhile.

Forking (``n > 1``): the parent publishes the prompt's whole pages, every branch locks the same
node, and each branch gets its own copy of the partial last page (``ops.copy_blocks``, before
the step's attention), which branch 0 keeps as the parent's.
"""

from __future__ import annotations

import numpy as np

import radixkv as rk
from radixkv.engine.request import I32
from radixkv.engine.seq import Seq


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class KVManager:
    def __init__(self, num_slots: int, page_size: int, radix: bool = True) -> None:
        if page_size < 1:
            raise rk.InvalidArgument(f"page_size must be >= 1, got {page_size}")
        if num_slots < 2 * page_size or num_slots % page_size:
            raise rk.InvalidArgument(
                f"pool_tokens must be a multiple of page_size ({page_size}) and hold at least two "
                f"pages, got {num_slots}"
            )
        self.page_size = page_size
        self.num_slots = num_slots
        self.num_pages = num_slots // page_size
        self.radix = radix  # off: each request matches and publishes only in its own namespace
        self.pool = rk.TokenPool(num_slots, page_size)
        self.cache = rk.RadixCache(self.pool)
        self.duplicate_pages_freed = 0
        self.forks = 0
        self.cow_copies = 0

    # -- capacity ------------------------------------------------------------------------------

    def free_pages(self) -> int:
        """Pages an allocation can get now: free ones plus unlocked cache (evictable)."""
        return (int(self.pool.available) + int(self.cache.evictable_size)) // self.page_size

    def in_use_tokens(self) -> int:
        """Slots held for running sequences: locked tree paths plus their own pages."""
        return int(self.cache.protected_size) + int(self.pool.num_out)

    def pages_for(self, seq: Seq, upto: int) -> int:
        """New pages ``seq`` needs so that positions ``< upto`` have one."""
        return max(0, ceil_div(upto, self.page_size) - seq.npages)

    # -- admission -----------------------------------------------------------------------------

    @staticmethod
    def _lookup(seq: Seq) -> I32:
        """All tokens but the last (which must be computed for its logits), as int32: a view of
        the prompt array for a fresh sequence, so the hot lookup converts nothing."""
        n = len(seq.tokens) - 1
        prompt = seq.req.prompt
        return prompt[:n] if n < prompt.size else np.asarray(seq.tokens[:n], np.int32)

    def peek(self, seq: Seq) -> int:
        """Read-only hit length for queue ordering (0 with radix off)."""
        if not self.radix:
            return 0
        return int(self.cache.peek_prefix(self._lookup(seq), seq.namespace))

    def admit(self, seq: Seq) -> int:
        """Match and lock ``seq``'s cached prefix; everything up to all its tokens is then to be
        computed (the last one yields the next token's logits). Returns the hit length."""
        m = self.cache.match_prefix(self._lookup(seq), seq.namespace)
        self.cache.lock(m.node)
        ps = self.page_size
        seq.node = m.node
        seq.locked_len = int(m.length)
        seq.kv_len = seq.locked_len
        seq.pages = np.ascontiguousarray(np.asarray(m.slots, np.int32)[::ps] // ps)
        seq.target = len(seq.tokens)
        return seq.locked_len

    def alloc(self, seq: Seq, upto: int) -> None:
        """Pages so that ``seq`` can write every position below ``upto`` (``OutOfSlots`` if the
        pool, after evicting all unlocked cache, cannot serve; nothing changes then)."""
        need = self.pages_for(seq, upto)
        if need:
            slots = np.asarray(self.cache.alloc(need * self.page_size), np.int32)
            seq.add_pages(slots[:: self.page_size] // self.page_size)

    def alloc_pages(self, count: int) -> I32:
        """``count`` fresh pages (``OutOfSlots`` if even eviction cannot serve them)."""
        ps = self.page_size
        return np.asarray(self.cache.alloc(count * ps), np.int32)[::ps] // ps

    def slots(self, seq: Seq, start: int, end: int) -> I32:
        pos = np.arange(start, end, dtype=np.int64)
        ps = self.page_size
        return (seq.pages[pos // ps].astype(np.int64) * ps + pos % ps).astype(np.int32)

    # -- tree updates --------------------------------------------------------------------------

    def _insert(self, seq: Seq) -> int:
        """Insert the whole pages with KV; free our duplicates of pages another sequence
        published first, and point ``seq.pages`` at the tree's copies. Returns the whole-page
        length inserted and moves the lock there."""
        ps = self.page_size
        full = seq.kv_len // ps * ps
        if full <= seq.locked_len:
            return seq.locked_len
        slots = self.slots(seq, 0, full)
        k, node = self.cache.insert_node(seq.tokens[:full], slots, seq.namespace)
        k = int(k)
        if k > seq.locked_len:
            # Another sequence published these pages first: keep the tree's, free ours.
            dup = seq.pages[seq.locked_len // ps : k // ps]
            self.pool.free(self._page_slots(dup))
            self.duplicate_pages_freed += int(dup.size)
            tree = np.asarray(self.cache.path_slots(node), np.int32)
            seq.pages[: k // ps] = tree[: k : ps] // ps
        self.cache.move_lock(seq.node, node)
        seq.node = node
        seq.locked_len = full
        return full

    def _page_slots(self, pages: I32) -> I32:
        ps = self.page_size
        return (pages.astype(np.int64)[:, None] * ps + np.arange(ps)).reshape(-1).astype(np.int32)

    def publish(self, seq: Seq) -> None:
        """After a prefill chunk: share its whole pages (a no-op for the tail of a page)."""
        self._insert(seq)

    def release(self, seq: Seq) -> None:
        """Finish or preempt: whole pages go to the tree (unlocked), the partial page is freed."""
        full = self._insert(seq)
        own = np.concatenate([seq.pages[full // self.page_size :], seq.fork_pages])
        seq.fork_pages = np.zeros(0, np.int32)
        if own.size:
            self.pool.free(self._page_slots(own))
        self.cache.unlock(seq.node)
        seq.node = None
        seq.pages = np.zeros(0, np.int32)
        seq.kv_len = seq.locked_len = 0

    def reserve_fork_pages(self, parent: Seq) -> int:
        """Before the parent's last prefill chunk: the pages its branches 1..n-1 will copy the
        partial last page into (none when the prompt ends on a page boundary). Allocated now so
        that the fork after the forward cannot run out. Returns how many."""
        k = (parent.req.params.n - 1) if parent.target % self.page_size else 0
        if k:
            ps = self.page_size
            slots = np.asarray(self.cache.alloc(k * ps), np.int32)
            parent.fork_pages = np.ascontiguousarray(slots[::ps] // ps)
        return k

    def fork(self, parent: Seq, children: list[Seq]) -> list[tuple[int, int]]:
        """Give each child the parent's KV: the same locked whole pages, and its own copy of the
        partial last page (from ``reserve_fork_pages``; spares are freed). Returns the (src, dst)
        page copies to run before the next attention."""
        self._insert(parent)
        ps = self.page_size
        full_pages = parent.locked_len // ps
        partial = parent.pages[full_pages:]  # 0 or 1 page
        spare = parent.fork_pages
        parent.fork_pages = np.zeros(0, np.int32)
        copies: list[tuple[int, int]] = []
        for i, child in enumerate(children):
            self.cache.lock(parent.node)
            child.node = parent.node
            child.locked_len = parent.locked_len
            child.kv_len = parent.kv_len
            child.target = parent.target
            pages = parent.pages[:full_pages]
            if partial.size:
                pages = np.concatenate([pages, spare[i : i + 1]])
                copies.append((int(partial[0]), int(spare[i])))
            child.pages = np.ascontiguousarray(pages, np.int32)
            self.forks += 1
        if spare.size > len(children):
            self.pool.free(self._page_slots(spare[len(children) :]))
        self.cow_copies += len(copies)
        return copies
