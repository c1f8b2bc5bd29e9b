"""``RadixKVPrefixCache``: SGLang 0.5.23's ``BasePrefixCache`` over radixkv's Rust radix tree.

The tree (``radixkv.RadixCache`` built without a pool) keeps token ids, slot ids, lock counts and
LRU order; SGLang keeps its own ``TokenToKVPoolAllocator`` and ``ReqToTokenPool``. Slots flow
between them as in SGLang's ``RadixCache``: ``checkpoint`` inserts a request's row and frees the
row's duplicates, ``evict`` hands the freed leaves' slots back to the allocator, and
``release_kv_cache`` (SGLang's) frees what the tree does not own. The duplicates are parked
(``_pending.PendingFrees``) and reach the allocator in one call at the next ``evict``, when the
parked count passes its bound, or at ``reset``; until then they count as evictable.

The calls SGLang's scheduler makes for every request (``match_prefix``, ``checkpoint``,
``prefix_device_indices``, ``lock``, ``unlock``) and its allocator's ``evict_for_alloc`` are the
native base's, ``radixkv._core.SGLangCacheBase``: they read SGLang's key and request objects
from Rust and call back into this class only for parking duplicates (``_park_duplicates``),
for an eviction while duplicates are parked (``_evict_tokens``) and for ids or tables of
unusual types (``_slots``).

Node handles are ``radixkv.Node`` objects: they survive splits made by later matches and inserts
(the deeper half keeps the handle, as in SGLang's tree) and raise ``radixkv.StaleHandle`` once
evicted.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union, cast

import numpy as np
import torch
from sglang.srt.mem_cache.base_prefix_cache import (
    BasePrefixCache,
    DecLockRefParams,
    DecLockRefResult,
    EvictResult,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchResult,
    TreeLock,
)
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

import radixkv
from radixkv._core import SGLangCacheBase

from ._events import EventConverter
from ._pending import PendingFrees
from ._slots import row_copy, row_views, slots_to_device, slots_to_host, tokens_view

if TYPE_CHECKING:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

Namespace = Union[None, Tuple[Optional[str], Optional[str]]]

# SGLang's --radix-eviction-policy values that map one to one onto radixkv's policies
# (tlru exists only in SGLang's UnifiedRadixCache).
SUPPORTED_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")


def namespace_of(extra_key: Optional[str], cache_salt: Optional[str]) -> Namespace:
    """SGLang's namespace is the pair (``extra_key``, ``cache_salt``); None differs from ""."""
    if extra_key is None and not cache_salt:
        return None
    return (extra_key, cache_salt or None)


class RadixKVPrefixCache(SGLangCacheBase, BasePrefixCache):  # type: ignore[misc]
    """Prefix cache for SGLang's scheduler, backed by ``radixkv.RadixCache``.

    Full-attention models only (no SWA, Mamba, HiCache or EAGLE bigram keys); the factory in
    ``radixkv.integrations.sglang`` refuses the rest before building one.
    """

    def __init__(self, params: CacheInitParams) -> None:
        policy = (params.eviction_policy or "lru").lower()
        if policy not in SUPPORTED_POLICIES:
            raise ValueError(
                f"radixkv radix-cache backend: eviction policy {policy!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_POLICIES)})"
            )
        if params.is_eagle:
            raise ValueError(
                "radixkv radix-cache backend: EAGLE bigram keys are not supported"
            )
        if params.page_size < 1:
            raise ValueError(f"radixkv radix-cache backend: page_size {params.page_size} < 1")
        # disable, req_to_token_pool, page_size: the native base's (its calls read them)
        self.disable = bool(params.disable)
        self.req_to_token_pool = params.req_to_token_pool
        self.token_to_kv_pool_allocator = params.token_to_kv_pool_allocator
        self.page_size = int(params.page_size)
        self.is_eagle = False
        self.eviction_policy = policy
        self.events_on = bool(params.enable_kv_cache_events) and not self.disable
        dev = getattr(self.token_to_kv_pool_allocator, "device", "cpu")
        self.device = torch.device(dev) if isinstance(dev, (str, torch.device)) else (
            torch.device("cpu"))
        self._on_cpu = self.device.type == "cpu"
        self._frees = PendingFrees(self.token_to_kv_pool_allocator, self.page_size, self.device)
        self._bind(
            match_result=MatchResult, evict_result=EvictResult, tree_lock=TreeLock,
            receipt=_RECEIPT, tokens_view=tokens_view, row_views=row_views, row_copy=row_copy,
            as_tensor=torch.from_numpy if self._on_cpu else functools.partial(
                slots_to_device, device=self.device),
            empty_indices=torch.empty((0,), dtype=torch.int64, device=self.device),
        )
        # a pool whose write is ReqToTokenPool's own (a plain table store) may be written
        # through the host row views of a CPU table (``row_views``); subclasses keep their write
        self._plain_write = type(self.req_to_token_pool).write is ReqToTokenPool.write
        if params.enable_metrics:
            self.init_metrics_collector()
        self.reset()

    # ---- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop every cached prefix. Like SGLang's caches, this frees none of the tree's slots
        (the scheduler's ``flush_cache`` clears the allocator next); parked duplicates are
        handed to the allocator first, so a reset without that clear loses none of them."""
        self._frees.flush()
        old = getattr(self, "tree", None)
        # events still undrained, then "all cleared", as SGLang's recorder reports a reset
        self._pending: List[Any] = self.take_events() if old is not None else []
        if self.events_on:
            if old is None:
                self._convert = EventConverter()
            self._pending.append(self._convert.all_cleared())
        # int64 ids in and out: SGLang's slot dtype, so path slots need no conversion;
        # sglang_stamps: hits counted on insert and split nodes stamped whole, as SGLang's
        # RadixCache does, so lfu / slru / lru evict in its order
        self.tree = radixkv.RadixCache(None, self.page_size, policy=cast(Any, self.eviction_policy),
                                       events=self.events_on, slot_dtype="int64",
                                       sglang_stamps=True)
        self.root_node = self.tree.root

    def evictable_size(self) -> int:
        """The tree's unlocked tokens plus the parked duplicates (free for the taking)."""
        return self.tree.evictable_size + self._frees.tokens

    def full_evictable_size(self) -> int:
        return self.tree.evictable_size + self._frees.tokens

    def protected_size(self) -> int:
        return self.tree.protected_size

    def full_protected_size(self) -> int:
        return self.tree.protected_size

    def total_size(self) -> int:
        return self.tree.total_size

    def sanity_check(self) -> None:
        """Every invariant of the tree (``radixkv.InvariantViolation`` names a broken one)."""
        self.tree.check()

    def pretty_print(self) -> None:
        print(
            f"radixkv tree: {self.tree.num_nodes} nodes, #tokens: {self.tree.total_size} "
            f"(evictable {self.tree.evictable_size}, protected {self.tree.protected_size}); "
            f"{self._frees.tokens} freed tokens not yet handed to the allocator"
        )

    def all_values_flatten(self) -> torch.Tensor:
        """Every cached slot (int64, on the KV device), in the tree's node order."""
        own = [np.asarray(s, dtype=np.int64) for _ns, _tok, s, *_ in self.tree.dump()]
        flat = np.concatenate(own) if own else np.empty(0, dtype=np.int64)
        return slots_to_device(flat, self.device)

    # ---- lookups ---------------------------------------------------------------------------
    def _key_arrays(self, key: RadixKey) -> Tuple[np.ndarray, Namespace]:
        if key.is_bigram:
            raise ValueError("radixkv radix-cache backend: bigram keys are not supported")
        n = len(key)  # honours key.limit
        n -= n % self.page_size
        return tokens_view(key.token_ids, n), namespace_of(key.extra_key, key.cache_salt)

    def touch_prefix(self, key: RadixKey) -> None:
        if self.disable:
            return
        tokens, ns = self._key_arrays(key)
        if len(tokens):
            self.tree.match_node(tokens, ns)

    def path_device_indices(self, node: Any) -> torch.Tensor:
        """Slots of the path root -> ``node``: contiguous int64 [depth] on the KV device."""
        if node == self.root_node:
            return torch.empty((0,), dtype=torch.int64, device=self.device)
        return slots_to_device(self.tree.path_slots(node), self.device)

    def free_kv_row(self, kv: Any, ranges: List[Tuple[int, int]]) -> None:
        """Give back row positions ``ranges`` of ``kv``'s row through SGLang's allocator.
        One range (what ``release_kv_cache`` passes) goes straight to ``free_segment``;
        several take the base class's path. The base class's sliding-window split never
        applies: the factory refuses SWA models."""
        if len(ranges) != 1:
            super().free_kv_row(kv, ranges)
            return
        start, end = ranges[0]
        if end > start:
            table = self.req_to_token_pool.req_to_token
            self.token_to_kv_pool_allocator.free_segment(
                table[kv.req_pool_idx, start:end], start_pos=start
            )

    # ---- inserts ---------------------------------------------------------------------------
    def insert(self, params: InsertParams) -> InsertResult:
        """Insert the whole pages of ``params.key`` with ``params.value`` (int slots; the token
        ids themselves when None, as SGLang's tests use it). ``prefix_len``: tokens already
        cached, whose slots in ``value`` the caller still owns and frees."""
        if self.disable:
            return InsertResult(prefix_len=0)
        tokens, ns = self._key_arrays(params.key)
        if params.value is None:
            slots = tokens.astype(np.int32)
        else:
            slots = slots_to_host(params.value[: len(tokens)])
        present, node = self.tree.insert_node(tokens, slots, ns,
                                              priority=float(params.priority or 0),
                                              inserted_len=int(params.inserted_len or 0))
        return InsertResult(prefix_len=present, total_len=len(tokens), last_device_node=node)

    def _park_duplicates(self, kv: Any, row: np.ndarray, protected: int, present: int,
                         dups: np.ndarray, views_table: bool) -> None:
        """``checkpoint``'s rare branch (the native base calls it): another request inserted
        row positions ``[protected, present)`` first, so the row's copies are duplicates. Park
        them (whole pages: both ends are page-aligned) and point the row at the tree's slots
        ``dups`` instead. ``row`` is a view of a CPU table's row when ``views_table``, else a
        host copy of its head."""
        frees = self._frees
        frees.add_segment(row[protected:present])
        if frees.tokens > frees.bound:
            frees.flush()
        if views_table and self._plain_write:
            row[protected:present] = dups  # NumPy store into the CPU table (casts to int32)
        else:
            table = self.req_to_token_pool.req_to_token
            self.req_to_token_pool.write(
                (kv.req_pool_idx, slice(protected, present)),
                slots_to_device(dups, table.device),
            )

    # ---- eviction --------------------------------------------------------------------------
    def _evict_tokens(self, want: int) -> int:
        """``evict``'s work for ``want`` > 0 tokens at page sizes > 1, or while duplicates are
        parked (the native base's ``evict`` / ``evict_for_alloc`` call it then): the parked
        slots first (no cached prefix is lost for them), then unlocked leaves in the policy's
        order, all to SGLang's allocator in one call (by page id at page sizes > 1: the
        leaves are whole pages); the tokens freed."""
        frees = self._frees
        got = frees.tokens
        if want > got:
            freed = self.tree.evict_slots(want - got)  # int64 (the tree's slot_dtype)
            if len(freed):
                self._evictions += 1
                got += len(freed)
                if self.page_size == 1:
                    frees.add_owned(freed)
                else:
                    frees.add_segment(freed)
        frees.flush()
        return got

    # ---- locks -----------------------------------------------------------------------------
    def inc_lock_ref(self, node: Any) -> IncLockRefResult:
        """Protect the path to ``node``; ``delta`` is the change in evictable tokens (<= 0)."""
        if self.disable:
            return IncLockRefResult(delta=0)
        return IncLockRefResult(delta=-self.tree.lock(node))

    def dec_lock_ref(
        self, node: Any, params: Optional[DecLockRefParams] = None
    ) -> DecLockRefResult:
        """Undo one ``inc_lock_ref(node)``; ``delta`` is the change in evictable tokens (>= 0)."""
        if self.disable:
            return DecLockRefResult(delta=0)
        return DecLockRefResult(delta=-self.tree.unlock(node))

    # ---- KV events -------------------------------------------------------------------------
    def take_events(self) -> List[Any]:
        """KV events since the last call as SGLang's ``BlockStored`` / ``BlockRemoved`` /
        ``AllBlocksCleared`` (radixkv's chained 64-bit page hashes); empty unless
        ``--enable-kv-cache-events``."""
        if not self.events_on:
            return []
        out = self._convert(self.tree.take_events())
        if self._pending:
            out, self._pending = self._pending + out, []
        return out


# Legacy caches carry no per-lock receipt; one shared empty receipt serves every TreeLock.
_RECEIPT = DecLockRefParams()

# The native base builds MatchResult as a tuple of its fields, the first four by position and
# the rest at their defaults: checked at import, so a SGLang that reorders them fails here,
# not with a wrong result (``_bind`` checks the same)
if MatchResult._fields[:4] != (
    "device_prefix_len", "last_device_node", "last_host_node", "best_match_node"
):
    raise ImportError(f"radixkv: SGLang's MatchResult fields changed: {MatchResult._fields}")

