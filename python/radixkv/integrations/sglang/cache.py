"""``RadixKVPrefixCache``: SGLang 0.5.23's ``BasePrefixCache`` over radixkv's Rust radix tree.

The tree (``radixkv.RadixCache`` built without a pool) keeps token ids, slot ids, lock counts and
LRU order; SGLang keeps its own ``TokenToKVPoolAllocator`` and ``ReqToTokenPool``. Slots flow
between them as in SGLang's ``RadixCache``: ``checkpoint`` inserts a request's row and frees the
row's duplicates, ``evict`` hands the freed leaves' slots back to the allocator, and
``release_kv_cache`` (SGLang's) frees what the tree does not own. The duplicates are parked
(``_pending.PendingFrees``) and reach the allocator in one call at the next ``evict``, when the
parked count passes its bound, or at ``reset``; until then they count as evictable.

Node handles are ``radixkv.Node`` objects: they survive splits made by later matches and inserts
(the deeper half keeps the handle, as in SGLang's tree) and raise ``radixkv.StaleHandle`` once
evicted.
"""

from __future__ import annotations

from array import array as _array
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union, cast

import numpy as np
import torch
from sglang.srt.mem_cache.base_prefix_cache import (
    BasePrefixCache,
    DecLockRefParams,
    DecLockRefResult,
    EvictParams,
    EvictResult,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
    TreeLock,
)
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

import radixkv

from ._events import EventConverter
from ._pending import PendingFrees
from ._slots import I64 as _I64
from ._slots import RowReader, slots_to_device, slots_to_host, tokens_view

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req
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


class RadixKVPrefixCache(BasePrefixCache):  # type: ignore[misc]  # SGLang is untyped here
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
        self._read_row = RowReader()
        self._frees = PendingFrees(self.token_to_kv_pool_allocator, self.page_size, self.device)
        # a pool whose write is ReqToTokenPool's own (a plain table store) may be written
        # through the host view RowReader holds of a CPU table; subclasses keep their write
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
        # the last prefix_device_indices: (n, node, the tensor, self._evictions then)
        self._prefix_kept: Optional[Tuple[int, Any, torch.Tensor, int]] = None
        self._evictions = 0  # calls that evicted from the tree
        self._empty_indices = torch.empty((0,), dtype=torch.int64, device=self.device)
        self._empty_match = self._match_result(0, self.root_node)

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

    def supports_prefix_sharing(self) -> bool:
        return not self.disable

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
        return torch.from_numpy(flat).to(self.device)

    # ---- lookups ---------------------------------------------------------------------------
    def _key_arrays(self, key: RadixKey) -> Tuple[np.ndarray, Namespace]:
        if key.is_bigram:
            raise ValueError("radixkv radix-cache backend: bigram keys are not supported")
        n = len(key)  # honours key.limit
        n -= n % self.page_size
        return tokens_view(key.token_ids, n), namespace_of(key.extra_key, key.cache_salt)

    def _match_result(self, length: int, node: Any) -> MatchResult:
        """``MatchResult(length, node, node, node)`` with every other field at its default,
        built as a plain tuple of the NamedTuple's fields (no keyword handling per call)."""
        return _new_tuple(MatchResult, (length, node, node, node) + _MATCH_DEFAULTS)

    def match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        """Longest cached whole-page prefix of ``params.key`` (capped at ``key.limit``) in its
        namespace; splits the node the match ends inside and refreshes the path's LRU time.
        Slots are not returned: SGLang reads them through ``prefix_device_indices``. As in
        SGLang, a match counts no hit and a split node is stamped whole (``sglang_stamps``)."""
        if self.disable:
            return self._empty_match
        key = params.key
        if key.is_bigram:
            raise ValueError("radixkv radix-cache backend: bigram keys are not supported")
        ids = key.token_ids
        n = whole = len(ids)
        limit = key.limit
        if limit is not None and limit < n:
            n = limit
        n -= n % self.page_size
        if n == 0:
            return self._empty_match
        # the slots are read after the lock (prefix_device_indices), so none are gathered here
        extra, salt = key.extra_key, key.cache_salt
        ns = None if extra is None and not salt else (extra, salt or None)  # namespace_of
        if type(ids) is _array and ids.typecode == "q":
            # the tree reads an array('q') in place; a cut one through a NumPy view
            tokens = ids if n == whole else _frombuffer(ids, _I64, n)
        else:
            tokens = tokens_view(ids, n)
        length, node = self.tree.match_node(tokens, ns)
        return _new_tuple(MatchResult, (length, node, node, node) + _MATCH_DEFAULTS)

    def touch_prefix(self, key: RadixKey) -> None:
        if self.disable:
            return
        tokens, ns = self._key_arrays(key)
        if len(tokens):
            self.tree.match_node(tokens, ns)

    def path_device_indices(self, node: Any) -> torch.Tensor:
        """Slots of the path root -> ``node``: contiguous int64 [depth] on the KV device."""
        if node == self.root_node:
            return self._empty_indices
        return slots_to_device(self.tree.path_slots(node), self.device)

    def prefix_device_indices(self, req: Req) -> torch.Tensor:
        """The first ``req.prefix_len`` slots of the path to ``req.last_node`` (the base
        class's result, cut on the host before the one conversion to a tensor).

        Requests that share a prefix (a system prompt, few-shot examples) often match the same
        node to the same length one after another: the last result is kept and handed out
        again for the same (length, node), read-only (SGLang copies it into its request
        table). A node's path holds the same slots for as long as the node lives (splits keep
        them, inserts add below), and a handle names one node only (an evicted node's handle
        is stale: it never equals a later node's). So the kept result is good while its node
        lives: certainly when nothing was evicted since it was made, else once the node is read
        (``StaleHandle`` if it was evicted, as the tree's read of the slots would raise).
        Only one is kept: a result that is not asked for again gives its memory back at the
        next call, to be reused warm."""
        n = req.prefix_len
        if n == 0:
            return self._empty_indices
        node = req.last_node
        kept = self._prefix_kept
        if kept is not None and kept[0] == n and kept[1] == node:
            if kept[3] != self._evictions:
                node.length  # StaleHandle if it was evicted  # noqa: B018
                self._prefix_kept = (n, node, kept[2], self._evictions)
            return kept[2]
        self._prefix_kept = None  # its memory goes back before the read allocates, warm
        # the path's first n slots only (InvalidArgument if the path is shorter), int64
        # (dtype None: the cache's; arguments by position, as each keyword costs a lookup)
        slots = _from_numpy(self.tree.path_slots(node, None, n))
        if not self._on_cpu:
            slots = slots.to(self.device)
        self._prefix_kept = (n, node, slots, self._evictions)
        return slots

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

    def checkpoint(self, req: Req, *, up_to: int, **kwargs: Any) -> None:
        """Insert ``req``'s KV up to row position ``up_to`` (whole pages), free the row's
        duplicates of what others inserted meanwhile, point the row at the tree's slots, move
        ``req.lock`` to the inserted path's end and advance ``req.kv.cache_protected_len``.
        The tree's part is one ``RadixCache.checkpoint`` call: the insert (hits only on nodes
        beyond what this request inserted before, SGLang's rule), the split at the prompt
        boundary one priority step up (as SGLang's cache: the output tail can then be evicted
        without the prompt), the lock move, and the tree's slots for the duplicates.

        A finished request's checkpoint is its last (SGLang's ``release_kv_cache``, which
        unlocks ``req.lock`` right after): its lock is released in the same call instead of
        moved, and ``req.lock`` is None, so that unlock has nothing left to do."""
        if self.disable:
            return
        kv = req.kv
        page = self.page_size
        n = up_to - up_to % page
        prompt = len(req.origin_input_ids)
        protected = kv.cache_protected_len
        inserted = kv.cache_inserted_len
        old = req.lock
        ids = req.full_untruncated_fill_ids
        table = self.req_to_token_pool.req_to_token
        # the whole row and the whole id array, both cut to n by the tree (no views made here)
        row = self._read_row(table, kv.req_pool_idx, n)
        tokens = ids if type(ids) is _array and ids.typecode == "q" else tokens_view(ids, n)
        extra, salt = req.extra_key, req.cache_salt
        keep = not req.finished()
        # arguments by position (each keyword costs a lookup per call): tokens, slots,
        # namespace, priority, inserted_len, boundary, lock_from, dup_from, keep_lock, length
        present, node, dups = self.tree.checkpoint(
            tokens,
            row,
            None if extra is None and not salt else (extra, salt or None),  # namespace_of
            float(req.priority or 0),
            inserted,
            prompt - prompt % page,
            None if old is None else old.node,
            protected,
            keep,
            n,
        )
        if inserted < n:
            kv.cache_inserted_len = n
        if dups is not None:
            # another request inserted [protected, present) first: the row's copies are
            # duplicates; park them (whole pages: both ends are page-aligned) and read the
            # tree's slots instead
            frees = self._frees
            frees.add_segment(row[protected:present])
            if frees.tokens > frees.bound:
                frees.flush()
            if self._plain_write and self._read_row.views_table:
                row[protected:present] = dups  # NumPy store into the CPU table (casts to int32)
            else:
                self.req_to_token_pool.write(
                    (kv.req_pool_idx, slice(protected, present)),
                    torch.from_numpy(dups).to(table.device),
                )
        kv.cache_protected_len = n
        req.lock = TreeLock(node, _RECEIPT) if keep else None
        req.last_node = node

    # ---- eviction --------------------------------------------------------------------------
    def evict(self, params: EvictParams) -> EvictResult:
        """Free ``params.num_tokens`` or as many as there are: the parked duplicates first (no
        cached prefix is lost for them), then unlocked leaves in the policy's order. Both go
        back to SGLang's allocator, in one call at page size 1; all count as evicted."""
        if self.disable or params.num_tokens <= 0:
            return EvictResult()
        return EvictResult(num_tokens_evicted=self._evict_tokens(params.num_tokens))

    def evict_for_alloc(
        self, params: EvictParams, *, allocation_reclaim_satisfied: Optional[Any] = None
    ) -> EvictResult:
        """The base class's (``evict(params)``; joint reclaim, a predicate, is not supported),
        without going through ``evict``: an allocator's eviction is one call less."""
        if allocation_reclaim_satisfied is not None:
            raise NotImplementedError("This cache does not support joint reclaim")
        if self.disable or params.num_tokens <= 0:
            return EvictResult()
        return EvictResult(num_tokens_evicted=self._evict_tokens(params.num_tokens))

    def _evict_tokens(self, want: int) -> int:
        """``evict``'s work for ``want`` > 0 tokens; the tokens freed."""
        frees = self._frees
        got = frees.tokens
        if want > got:
            freed = self.tree.evict_slots(want - got)  # int64 (the tree's slot_dtype)
            if len(freed):
                self._evictions += 1
                got += len(freed)
                if self.page_size == 1 and frees.tokens:
                    frees.add_owned(freed)  # one allocator call for both
                else:
                    ids = _from_numpy(freed)
                    self.token_to_kv_pool_allocator.free(
                        ids if self._on_cpu else ids.to(self.device))
        if frees.tokens:
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

    # lock / unlock as the base class's, without its result objects in between
    def lock(self, node: Any) -> Optional[TreeLock]:
        if not self.disable:
            self.tree.lock(node)
        return TreeLock(node, _RECEIPT)

    def unlock(self, lock: Optional[TreeLock]) -> None:
        if lock is not None and not self.disable:
            self.tree.unlock(lock.node)


# Legacy caches carry no per-lock receipt; one shared empty receipt serves every TreeLock.
_RECEIPT = DecLockRefParams()

# MatchResult's fields past the first four, at their defaults (checked against its field list
# at import, so a SGLang that reorders them fails here, not with a wrong result)
if MatchResult._fields[:4] != (
    "device_prefix_len", "last_device_node", "last_host_node", "best_match_node"
):
    raise ImportError(f"radixkv: SGLang's MatchResult fields changed: {MatchResult._fields}")
_MATCH_DEFAULTS = tuple(MatchResult._field_defaults[f] for f in MatchResult._fields[4:])
_new_tuple = tuple.__new__
_from_numpy = torch.from_numpy
_frombuffer = np.frombuffer
