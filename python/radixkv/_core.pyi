"""Type stub of the compiled extension ``radixkv._core`` (checked by ``mypy.stubtest``)."""

from collections.abc import Callable, Sequence
from typing import Any, Literal, Optional, Union, final

import numpy as np
import numpy.typing as npt

from typing_extensions import disjoint_base

from radixkv.metadata import BlockTableMetadata, DecodeMetadata, ExtendMetadata

# Token / slot sequences: a list or tuple of ints, a 1-D NumPy integer array, an array.array of an
# integer typecode, or a 1-D CPU torch tensor of an integer dtype (typed loosely so torch stays
# optional).
_IntSeq = Union[list[int], tuple[int, ...], npt.NDArray[np.integer], object]
# None, a str, or a tuple of str / None. Equal namespaces share prefixes; different ones never
# do, whatever their tokens.
_Namespace = Union[None, str, tuple[Union[str, None], ...]]
_Int32Array = npt.NDArray[np.int32]
# Slot ids handed out: int32 or int64, as the cache's ``slot_dtype`` or a call's ``dtype=`` says.
_SlotArray = npt.NDArray[np.signedinteger[Any]]
# An int32 / int64 choice: "int32" / "int64", a NumPy dtype or scalar type, or a torch dtype.
_SlotDtype = object
_Policy = Literal["lru", "lfu", "fifo", "mru", "filo", "priority", "slru"]

__version__: str

class RadixKVError(Exception): ...
class InvalidArgument(RadixKVError): ...
class StaleHandle(InvalidArgument): ...
class NotLocked(InvalidArgument): ...
class UnknownSequence(InvalidArgument): ...
class DoubleFree(InvalidArgument): ...
class OutOfSlots(RadixKVError): ...
class OutOfBlocks(OutOfSlots): ...
class InvariantViolation(RadixKVError): ...

@final
class TokenPool:
    """Slot allocator of one KV pool, in pages of ``page_size`` slots.

    Page ``p`` is slots ``p*page_size .. p*page_size + page_size - 1``. ``alloc(n)`` needs ``n``
    to be a multiple of ``page_size`` and returns ``n // page_size`` whole pages. A page is
    available again once all of its slots are free.
    """

    def __new__(cls, num_slots: int, page_size: int = 1) -> TokenPool: ...
    def alloc(self, n: int, *, dtype: _SlotDtype = None) -> _SlotArray:
        """``n`` slot ids (int32, or int64 with ``dtype``); ``OutOfSlots`` if fewer than ``n``
        are available. ``num_slots`` is at most 2**31 - 1, so ids fit either width."""
    def free(self, slots: _IntSeq) -> None:
        """Return slots from ``alloc``. ``DoubleFree`` for a slot already free, listed twice or
        held by the radix cache; ``InvalidArgument`` out of range. Nothing is freed then."""
    @property
    def available(self) -> int: ...
    @property
    def num_slots(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def num_out(self) -> int:
        """Slots handed out and neither freed nor inserted into the cache."""
    @property
    def num_cached(self) -> int:
        """Slots held by the radix cache built on this pool."""
    def check(self) -> None: ...

@final
class Node:
    """The end of a matched path. Survives splits of its node made by later matches and
    inserts; eviction retires it and every use then raises ``StaleHandle``.

    The properties are a read-only view of the node as it is now."""

    @property
    def lock_ref(self) -> int: ...
    @property
    def last_access(self) -> int:
        """Logical clock of the last match / insert through this node."""
    @property
    def hit_count(self) -> int:
        """Matches that went through this node."""
    @property
    def length(self) -> int:
        """Tokens on this node's own edge."""
    @property
    def depth(self) -> int:
        """Tokens from the root to this path end (the cached length of the path)."""
    @property
    def num_children(self) -> int: ...
    @property
    def parent(self) -> Node:
        """The node above; the root node for a top-level node and for the root itself."""
    @property
    def children(self) -> list[Node]:
        """Nodes below, by first token (the root: every namespace's top-level nodes). Scans
        the tree's edge map, O(nodes): for inspection, not a hot path."""
    @property
    def key(self) -> list[int]:
        """Token ids of this node's own edge."""
    @property
    def value(self) -> _SlotArray:
        """Slot ids of this node's own edge, in the cache's ``slot_dtype``."""
    @property
    def created(self) -> int:
        """Logical clock at which these tokens were first cached (a split keeps it)."""
    @property
    def priority(self) -> float:
        """Highest ``insert(..., priority=)`` that went through this node."""
    @property
    def is_root(self) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Match:
    """Result of ``RadixCache.match_prefix``."""

    @property
    def length(self) -> int: ...
    @property
    def slots(self) -> _SlotArray:
        """The matched slots: a fresh array (the cache's ``slot_dtype``, or the call's
        ``dtype``), or a view of ``out[:length]`` when ``match_prefix`` wrote into ``out``."""
    @property
    def node(self) -> Node: ...
    @property
    def tail_length(self) -> int:
        """With ``partial_pages``: tokens after ``length`` (fewer than a page) that equal the
        start of a cached page; 0 otherwise."""
    @property
    def tail_slots(self) -> _SlotArray | None:
        """Those tokens' slots: the first ``tail_length`` slots of the page to copy (its page
        id is ``tail_slots[0] // page_size``). Allocate a fresh page, copy the source page into
        it (``ops.copy_blocks``), and the request owns the copy and reuses
        ``length + tail_length`` tokens. None without a tail."""
    @property
    def tail_node(self) -> Node | None:
        """The node holding that page; ``lock`` it while the copy is pending if an allocation
        could evict it in between (the match itself does not touch or split it)."""

@final
class BlockStored:
    """KV event: pages the cache stored (one new leaf). ``block_hashes`` has one 64-bit hash
    per page, each chained from the one before (``parent_block_hash`` is the hash of the page
    before the first, None at the start of a namespace); ``token_ids`` are the pages' tokens,
    ``block_size`` the page size, ``namespace`` the insert's namespace. Hashes are signed
    (-2**63 .. 2**63 - 1), as SGLang publishes its block hashes."""

    @property
    def block_hashes(self) -> list[int]: ...
    @property
    def parent_block_hash(self) -> Optional[int]: ...
    @property
    def token_ids(self) -> list[int]: ...
    @property
    def block_size(self) -> int: ...
    @property
    def namespace(self) -> _Namespace: ...

@final
class BlockRemoved:
    """KV event: pages evicted (one leaf), by (signed 64-bit) hash."""

    @property
    def block_hashes(self) -> list[int]: ...

@final
class AllBlocksCleared:
    """KV event: ``reset()`` dropped everything."""

_KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]

@final
class RadixCache:
    """Radix prefix cache over a ``TokenPool``, or over caller-owned slots (``pool=None``).

    ``page_size > 1``: match and insert use only the first ``len(tokens) // page_size`` whole
    pages; the partial last page is ignored by both. ``insert`` returns the number of leading
    tokens already cached; the caller keeps (and frees) ``slots[:returned]`` and the slots of
    the partial last page. With a pool, each inserted page of slots must be one whole pool page
    in order, as ``alloc`` returns them, and must be allocated and not yet cached.

    Options (keyword-only):

    - ``policy``: which unlocked leaf is evicted first. ``"lru"`` (default, least recent
      access), ``"lfu"`` (fewest hits, then lru), ``"fifo"`` / ``"filo"`` (oldest / newest
      cached), ``"mru"`` (most recent access), ``"priority"`` (lowest ``insert`` priority,
      then lru), ``"slru"`` (leaves hit fewer than 2 times before the others, lru within each).
      Locked paths are never evicted; each evicted leaf costs O(log n).
    - ``events``: record KV events for ``take_events()`` (off: no hashing, no cost).
    - ``partial_pages`` (``page_size > 1``): sub-page reuse. ``insert`` also caches the partial
      last page (its slots must be the first ones of one pool page) unless a child there
      already starts with those tokens, and ``match_prefix`` reports a ``tail`` to copy on
      write (see ``Match.tail_slots``), so a paged cache keeps a page-1 cache's hit rate.
      ``insert`` then returns ``len(tokens)`` when everything, the partial page included, was
      cached already; otherwise the cache takes ``slots[returned:len(tokens)]``. A shadowed
      partial page (a longer one or a whole page came later) stays until evicted. With a pool,
      a partial page holds only part of a pool page, so ``alloc`` may evict and still raise
      ``OutOfSlots``. Partial pages never appear in KV events.
    - ``slot_dtype``: ``"int32"`` (default) or ``"int64"`` (also a NumPy or torch dtype): the
      dtype of slot arrays handed out when a call gives no ``dtype=``. Slot inputs may be int32
      or int64 either way. Without a pool, ids up to 2**63 - 1 are accepted; once an id above
      2**31 - 1 has been cached, an int32 output is refused with ``InvalidArgument`` before
      anything changes.
    - ``sglang_stamps``: hit counts and access times as SGLang's ``RadixCache`` keeps them (for
      its scheduler's plugin): a match counts no hit; ``insert_node`` counts one on each node
      of its path ending beyond ``inserted_len``; a node split by a match or an insert gets
      the access time on both halves. Off (default): a match counts a hit on its path, an
      insert none, and only the path is stamped. Changes lfu / slru (and lru) order only.
    """

    def __new__(
        cls,
        pool: TokenPool | None,
        page_size: int | None = None,
        *,
        policy: _Policy = "lru",
        events: bool = False,
        slot_dtype: _SlotDtype = None,
        partial_pages: bool = False,
        sglang_stamps: bool = False,
    ) -> RadixCache: ...
    def match_prefix(
        self,
        tokens: _IntSeq,
        namespace: _Namespace = None,
        *,
        out: npt.NDArray[np.signedinteger[Any]] | None = None,
        dtype: _SlotDtype = None,
    ) -> Match:
        """Longest cached prefix (whole pages); splits the node the match ends inside, touches
        the path (access time, hit count). With ``out`` (a 1-D, C-contiguous, writeable int32
        or int64 array of at least ``len(tokens)`` ids, e.g. the request's row of the
        scheduler's slot table), the slots are written into ``out[:length]`` and
        ``Match.slots`` is a view of them; a bad ``out`` raises ``InvalidArgument`` before
        anything changes."""
    def match_node(
        self, tokens: _IntSeq, namespace: _Namespace = None, length: Optional[int] = None
    ) -> tuple[int, Node]:
        """``match_prefix`` without the slots: ``(length, node)``, with the same split, access
        time and hit count (no partial-page tail). For a caller that reads the slots later, if
        at all, through ``path_slots`` (SGLang's scheduler locks the node first). ``length``:
        only the first ``length`` tokens are matched (``tokens`` must hold that many)."""
    def peek_prefix(self, tokens: _IntSeq, namespace: _Namespace = None) -> int:
        """Hit length only; no split, no access-time or hit-count change."""
    def insert(
        self, tokens: _IntSeq, slots: _IntSeq, namespace: _Namespace = None, *, priority: float = 0.0
    ) -> int:
        """Cache the whole pages of ``tokens``; the leading tokens already cached. ``priority``
        (finite, else ``InvalidArgument``) becomes the new nodes' priority and raises every
        node of the path to at least it (max-propagated, as SGLang does)."""
    def insert_node(
        self,
        tokens: _IntSeq,
        slots: _IntSeq,
        namespace: _Namespace = None,
        *,
        priority: float = 0.0,
        inserted_len: int = 0,
    ) -> tuple[int, Node]:
        """As ``insert``, also returning the ``Node`` where the inserted whole pages end: what a
        scheduler locks next, without a second ``match_prefix``. A path already cached that
        ends inside a node splits it there, as ``match_prefix`` would; the node survives later
        splits like any handle. The root node when ``tokens`` holds no whole page.
        ``inserted_len`` (>= 0; used with ``sglang_stamps``): leading tokens this request
        inserted before, whose nodes count no new hit."""
    def checkpoint(
        self,
        tokens: _IntSeq,
        slots: _IntSeq,
        namespace: _Namespace = None,
        priority: float = 0.0,
        inserted_len: int = 0,
        boundary: int = 0,
        lock_from: Optional[Node] = None,
        dup_from: int = 0,
        keep_lock: bool = True,
        length: Optional[int] = None,
    ) -> tuple[int, Node, Optional[_SlotArray]]:
        """A scheduler's checkpoint of a running request in one call: ``insert_node(tokens,
        slots, namespace, priority=, inserted_len=)``; then, when ``0 < boundary <
        len(tokens)``, the same for ``tokens[:boundary]`` with ``priority + 1`` and
        ``inserted_len=boundary`` (a split at the prompt boundary, as SGLang's cache makes);
        then the request's lock moves from ``lock_from`` (None: it holds none) to the inserted
        path's end. Returns ``(present, node, duplicates)``: tokens already cached, the path's
        end, and when ``present > dup_from`` the tree's slots for positions
        ``[dup_from, present)`` (the cache's ``slot_dtype``), else None. ``keep_lock=False`` (a
        request done with its KV, whose caller would unlock next): ``lock_from``'s lock is
        released instead of moved, and the end is left unlocked. Everything, the lock on
        ``lock_from`` included (``NotLocked``, ``StaleHandle``), is checked before anything
        changes. ``length``: only the first ``length`` tokens and slots are used (each must hold
        that many; ``InvalidArgument`` otherwise), so a request's whole id array and whole
        table row can be passed as they are."""
    def lock(self, node: Node) -> int:
        """``lock_ref += 1`` up to the root; the tokens that became protected (>= 0). SGLang's
        ``inc_lock_ref`` delta (change in evictable tokens) is its negation."""
    def unlock(self, node: Node) -> int:
        """Undo one ``lock`` taken through this node (``NotLocked`` if none is left); the change
        in protected tokens (<= 0)."""
    def move_lock(self, from_node: Node, to_node: Node) -> int:
        """``lock(to_node)`` then ``unlock(from_node)`` in one call, as a scheduler moves a
        request's lock to the end of the path it just inserted; the net change in protected
        tokens. Changes nothing if the unlock would fail (``NotLocked``, ``StaleHandle``)."""
    def alloc(
        self, n: int, *, out: npt.NDArray[np.signedinteger[Any]] | None = None, dtype: _SlotDtype = None
    ) -> _SlotArray:
        """``n`` slots from the pool, evicting leaves first if it is short. ``OutOfSlots``
        (nothing evicted) when the pool plus everything evictable is not enough. With
        ``partial_pages`` an evicted leaf frees its page only when nothing else on it is cached
        or out, so ``OutOfSlots`` comes at once only when a whole page per evictable token would
        not be enough, and otherwise may follow some eviction. With ``out``
        (a 1-D, C-contiguous, writeable int32 or int64 array of at least ``n`` ids) the slots
        are written into ``out[:n]``, which is returned (``out`` itself when it holds exactly
        ``n``); nothing is written on failure."""
    def evict(self, num_tokens: int) -> int:
        """Evict whole unlocked leaves in the policy's order until ``num_tokens`` are freed;
        the count freed."""
    def evict_slots(self, num_tokens: int, *, dtype: _SlotDtype = None) -> _SlotArray:
        """As ``evict``, returning the freed ids (with a pool they are already back in it)."""
    def reset(self, *, dtype: _SlotDtype = None) -> _SlotArray:
        """Drop every node (all handles go stale) and return their slot ids (with a pool,
        already back in it); records ``AllBlocksCleared`` with events on. ``InvalidArgument``,
        nothing changed, while anything is locked."""
    def path_slots(
        self, node: Node, dtype: _SlotDtype = None, limit: Optional[int] = None
    ) -> _SlotArray:
        """Slots from the root to ``node``; with ``limit``, only the first ``limit``
        (``InvalidArgument`` if the path is shorter)."""
    def take_events(self) -> list[_KvEvent]:
        """KV events since the last call, oldest first; empty unless ``events=True``.

        ``BlockStored`` per new leaf (its new pages), ``BlockRemoved`` per evicted leaf,
        ``AllBlocksCleared`` per ``reset``. A split emits nothing: the pages and their hashes
        are unchanged (the hash list is cut in two), as in SGLang."""
    @property
    def root(self) -> Node: ...
    @property
    def evictable_size(self) -> int: ...
    @property
    def protected_size(self) -> int: ...
    @property
    def total_size(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def events(self) -> bool: ...
    @property
    def slot_dtype(self) -> str: ...
    @property
    def partial_pages(self) -> bool: ...
    @property
    def evicted_tokens(self) -> int:
        """Tokens evicted since the cache was made, by ``evict`` / ``evict_slots`` and by
        ``alloc`` when the pool was short."""
    @property
    def num_nodes(self) -> int: ...
    @property
    def memory_bytes(self) -> int:
        """Approximate heap bytes of the tree's bookkeeping; / total_size = bytes per token."""
    @property
    def pool(self) -> TokenPool | None: ...
    def check(self) -> None:
        """Verify every invariant; ``InvariantViolation`` names the first broken one."""
    def dump(self) -> list[tuple[bytes, list[int], list[int], int, int, int]]:
        """Every node as (namespace, path tokens, own slots, lock_ref, last_access,
        hit_count), sorted."""

# ---- Paged block allocator and batch metadata (docs/contract.md §1, §3) ---------------------

# Sequence ids: non-negative ints below 2**64 (a list / tuple, or a 1-D integer array / tensor).
_SeqIds = Union[list[int], tuple[int, ...], npt.NDArray[np.integer], object]
# One int sequence per request (each: list, NumPy integer array or CPU torch tensor). The outer
# container must be a list or tuple at runtime; Sequence here keeps list[ndarray] acceptable.
_PerRequest = Sequence[_IntSeq]

@final
class BlockAllocator:
    """vLLM-style paged allocator: ``num_blocks`` physical blocks of ``block_size`` slots.

    Block ``p`` holds slots ``p*block_size .. p*block_size + block_size - 1``. Each sequence has a
    block table (logical block i -> physical block) and a length; it holds exactly
    ``ceil(len / block_size)`` blocks. Blocks carry reference counts: ``fork`` shares them, a
    write into a shared, partly filled last block copies it first (copy-on-write), and a block is
    free exactly when its count is 0. ``num_blocks * block_size`` must be at most ``2**31``.
    Every method validates everything before changing anything: an error changes nothing.
    """

    def __new__(cls, num_blocks: int, block_size: int) -> BlockAllocator: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def num_seqs(self) -> int: ...
    def __len__(self) -> int: ...
    def __contains__(self, seq_id: object, /) -> bool: ...
    def seq_ids(self) -> list[int]:
        """Live sequence ids, ascending."""
    def blocks_needed(self, num_tokens: int) -> int:
        """``ceil(num_tokens / block_size)``: blocks a new sequence of that length takes."""
    def can_allocate(self, num_tokens: int) -> bool:
        """Whether ``allocate(new_id, num_tokens)`` would find enough free blocks."""
    def can_append(self, seq_id: int, num_tokens: Optional[int] = None) -> bool:
        """Whether ``append_slots(seq_id, num_tokens)`` (default 1) would succeed, counting the
        copy-on-write block if one is needed. ``UnknownSequence`` for an unknown id."""
    def allocate(self, seq_id: int, num_tokens: int) -> None:
        """Map ``ceil(num_tokens / block_size)`` fresh blocks to a new sequence.
        ``UnknownSequence`` if ``seq_id`` exists; ``OutOfBlocks`` if too few are free."""
    def append_slots(self, seq_id: int, num_tokens: Optional[int] = None) -> list[tuple[int, int]]:
        """Add ``num_tokens`` (default 1) tokens; a block is taken only when the last is full.

        Returns the copy-on-write pairs ``[(src_block, dst_block)]`` the GPU must copy before
        attention (at most one: when the tokens land in a partly filled last block another
        sequence shares). ``OutOfBlocks`` (nothing changed) if the copy plus the new blocks do
        not fit."""
    def append_slots_batch(
        self, seq_ids: _SeqIds, num_tokens: Optional[int] = None
    ) -> tuple[_Int32Array, _Int32Array]:
        """``append_slots(seq_id, num_tokens)`` (default 1) for each of ``seq_ids`` in order, all
        or nothing: ``OutOfBlocks`` if the whole batch does not fit, and nothing changes then;
        ``InvalidArgument`` if an id is listed twice. One call per decode step.

        Returns ``(copies, slots)``: int32 ``[k, 2]`` copy-on-write pairs ``(src, dst)``, ready
        for ``copy_blocks``, and int32 ``[len(seq_ids) * num_tokens]`` slots of the new tokens
        (where their K/V is written), sequence by sequence."""
    def fork(self, parent_id: int, child_id: int) -> None:
        """Share the parent's blocks with a new sequence (zero copy, ref counts + 1).
        ``UnknownSequence`` if the parent is unknown or the child exists."""
    def free(self, seq_id: int) -> None:
        """Drop a sequence; each block loses a reference and is free again at 0."""
    def seq_len(self, seq_id: int) -> int: ...
    def ref_count(self, block: int) -> int:
        """References to physical ``block`` (``InvalidArgument`` if out of range)."""
    def block_table(self, seq_id: int) -> _Int32Array:
        """int32 ``[ceil(len / block_size)]``: the sequence's physical blocks."""
    def block_tables(self, seq_ids: _SeqIds, width: Optional[int] = None) -> _Int32Array:
        """int32 ``[len(seq_ids), width]`` block tables padded with 0; ``width`` defaults to the
        longest table (pass a fixed one for CUDA graphs; narrower raises ``InvalidArgument``)."""
    def slot_mapping(
        self, seq_id: int, start: Optional[int] = None, end: Optional[int] = None
    ) -> _Int32Array:
        """int32 ``[end - start]``: physical slot of each token position ``start..end``
        (defaults ``0`` and ``seq_len``); ``InvalidArgument`` unless
        ``0 <= start <= end <= len``."""
    def decode_metadata(self, seq_ids: _SeqIds) -> DecodeMetadata[_Int32Array]:
        """CSR decode metadata over these sequences' blocks (``page_size = block_size``):
        ``qo_indptr``, ``kv_indptr``, ``kv_indices`` (blocks), ``seq_lens``, ``kv_last_page_len``,
        ``out_cache_loc`` (slot of each last token). Every sequence needs at least one token."""
    def extend_metadata(
        self, seq_ids: _SeqIds, extend_lens: Union[int, _IntSeq]
    ) -> ExtendMetadata[_Int32Array]:
        """Extend metadata over these sequences' blocks, the last ``extend_lens[i]`` tokens of
        each (one count per sequence, or one int for all) being new: call it after ``allocate``
        / ``append_slots`` made room for them. ``kv_indptr`` / ``kv_indices`` list blocks;
        ``out_cache_loc`` gives the new tokens' slots. ``InvalidArgument`` if a count exceeds
        its sequence's length or a sequence is empty."""
    def block_table_metadata(
        self, seq_ids: _SeqIds, width: Optional[int] = None
    ) -> BlockTableMetadata[_Int32Array]:
        """Block-table decode metadata: ``block_tables [n, width]``, ``seq_lens``,
        ``kv_last_page_len``, ``out_cache_loc``."""
    def check(self) -> None:
        """Verify every invariant (ref counts equal table references; the free list holds
        exactly the blocks with count 0, once each; table sizes match lengths).
        ``InvariantViolation`` names the first one broken."""

def build_extend_metadata(
    prefix_slots: _PerRequest,
    new_slots: _PerRequest,
    plan_group: Optional[int] = None,
    plan_tile_rows: Optional[int] = None,
) -> ExtendMetadata[_Int32Array]:
    """Extend (prefix-prefill) metadata, one entry per request: ``prefix_slots[b]`` are cached,
    ``new_slots[b]`` receive the new tokens. Fields (int32, views of one buffer): ``qo_indptr``
    [n+1], ``kv_indptr`` [n+1], ``seq_lens``, ``extend_seq_lens``, ``extend_prefix_lens``,
    ``extend_start_loc``, ``kv_last_page_len`` (all 1) [n], ``kv_indices`` [sum seq_lens],
    ``out_cache_loc`` and ``positions`` [sum extend_seq_lens]. With ``plan_group`` (query heads
    per KV head) and ``plan_tile_rows`` (``radixkv.ops.extend_tile_rows``), also ``extend_plan``
    (see :func:`build_extend_plan`) and the scalar ``plan_tile_rows``. ``InvalidArgument`` for
    unequal lengths, negative slots, totals beyond int32, or only one of the plan arguments."""

def build_paged_extend_metadata(
    pages: _PerRequest,
    kv_lens: _IntSeq,
    extend_lens: _IntSeq,
    page_size: Optional[int] = None,
    plan_group: Optional[int] = None,
    plan_tile_rows: Optional[int] = None,
) -> ExtendMetadata[_Int32Array]:
    """Extend metadata over pages: request b holds ``kv_lens[b]`` tokens in ``pages[b]``
    (``ceil(kv_len / page_size)`` pages), the last ``extend_lens[b]`` of them new. Same fields as
    :func:`build_extend_metadata` (the plan arguments too), with ``kv_indptr`` / ``kv_indices``
    over pages; with ``page_size`` 1 (the default) the result equals it."""

def build_extend_plan(
    q_lens: _IntSeq, kv_lens: _IntSeq, group: int, tile_rows: int
) -> _Int32Array:
    """extend_attention's work list for requests of ``q_lens`` queries over ``kv_lens`` keys
    (new tokens included), ``group`` query heads per KV head, query tiles of ``tile_rows`` rows:
    flat int32 ``[2 * n]`` of ``(request, rank)`` entries (rank 0 = a request's last tile),
    heaviest tiles first; empty for a batch whose requests all have the same lengths when the
    kernels' own order already is the plan's (requests of at most 512 keys, or of 16+ tiles).
    ``InvalidArgument`` for unequal counts, a negative
    length, more queries than keys, a ``group`` or ``tile_rows`` of 0, or sizes beyond int32."""

def build_decode_metadata(
    pages: _PerRequest,
    kv_lens: Optional[_IntSeq] = None,
    page_size: Optional[int] = None,
    plan_slots: Optional[int] = None,
    plan_capacity: Optional[int] = None,
) -> DecodeMetadata[_Int32Array]:
    """CSR decode metadata. ``pages[b]``: request b's pages in order (its slots when
    ``page_size`` is 1, the default); ``kv_lens[b]``: its valid tokens (required when
    ``page_size > 1``; must match ``ceil(kv_len / page_size)`` pages and be >= 1). Fields:
    ``qo_indptr``, ``kv_indptr``, ``kv_indices``, ``seq_lens`` (= ``kv_lens``), ``kv_last_page_len``,
    ``out_cache_loc`` (slot of each request's last token). With ``plan_slots`` (work units the GPU
    runs at once, ``radixkv.ops.decode_slots``) also ``decode_plan``, paged_decode's work plan, in
    the same buffer, with ``plan_capacity`` unit rows (default: those used; pass
    :func:`decode_plan_capacity` for CUDA graphs)."""

def build_block_table_metadata(
    pages: _PerRequest,
    kv_lens: Optional[_IntSeq] = None,
    page_size: Optional[int] = None,
    width: Optional[int] = None,
    plan_slots: Optional[int] = None,
    plan_capacity: Optional[int] = None,
) -> BlockTableMetadata[_Int32Array]:
    """Block-table decode metadata (``block_tables [n, width]`` zero-padded, ``seq_lens``,
    ``kv_last_page_len``), from the same inputs as :func:`build_decode_metadata` (``plan_slots``,
    ``plan_capacity`` likewise)."""

def build_decode_plan(
    kv_lens: _IntSeq,
    page_size: int,
    slots: Optional[int] = None,
    capacity: Optional[int] = None,
    units_per_request: Optional[int] = None,
) -> tuple[_Int32Array, int, int]:
    """paged_decode's work plan for requests of ``kv_lens`` tokens: int32
    ``[4 * capacity + n]``, unit rows ``(request, kv_start, kv_end, units of the request)`` (unused:
    ``(-1, 0, 0, 0)``) then each request's first unit row. Balanced for ``slots`` concurrent units
    (chunks of about equal, page-aligned length), or every request cut into ``units_per_request``
    units; exactly one of the two. ``capacity``: unit rows (default: those used). Returns
    ``(plan, units used, chunk length)``. Raises InvalidArgument for a negative length or a
    capacity below the units needed."""

def decode_plan_capacity(batch: int, slots: int) -> int:
    """Unit rows a balanced plan of ``batch`` requests for ``slots`` concurrent units needs at
    most: a fixed plan buffer size for CUDA graphs."""

@disjoint_base
class SGLangCacheBase:
    """Native base of ``radixkv.integrations.sglang.RadixKVPrefixCache`` (not useful alone).

    Implements the calls SGLang's scheduler makes for every request, reading SGLang's key and
    request objects from Rust; the subclass sets it up with ``_bind`` and ``tree`` and keeps
    every other method. ``checkpoint`` calls the subclass's ``_park_duplicates(kv, row,
    protected, present, dups, views_table)`` when another request cached part of the row
    first, and ``evict`` its ``_evict_tokens(n)`` while ``_frees.tokens`` are parked; ``evict``
    frees through its ``token_to_kv_pool_allocator``. Using it before ``_bind`` and ``tree``
    raises ``RuntimeError``."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> SGLangCacheBase: ...
    def _bind(
        self,
        *,
        match_result: type,
        evict_result: type,
        tree_lock: type,
        receipt: object,
        tokens_view: Callable[[Any, int], npt.NDArray[np.int64]],
        row_views: Callable[[Any], Optional[list[npt.NDArray[np.integer]]]],
        row_copy: Callable[[Any, int, int], npt.NDArray[np.integer]],
        as_tensor: Callable[[npt.NDArray[np.int64]], Any],
        empty_indices: Any,
    ) -> None:
        """SGLang's ``MatchResult`` (a NamedTuple whose first four fields are the device
        prefix length and three nodes; ``InvalidArgument`` otherwise), ``EvictResult`` and
        ``TreeLock`` with the receipt every lock carries; the plugin's converters for ids that
        are no ``array.array`` and for table rows; ``as_tensor``, which makes host int64 ids a
        tensor on the KV device (``torch.from_numpy`` on the CPU); and the empty int64 tensor
        on that device."""
    @property
    def tree(self) -> Optional[RadixCache]:
        """The radix tree; setting one drops what was kept of the last."""
    @tree.setter
    def tree(self, tree: RadixCache) -> None: ...
    @property
    def page_size(self) -> int:
        """Tokens per page (>= 1; ``InvalidArgument`` otherwise)."""
    @page_size.setter
    def page_size(self, page_size: int) -> None: ...
    @property
    def disable(self) -> bool:
        """SGLang's ``--disable-radix-cache``: matches are empty, checkpoints do nothing."""
    @disable.setter
    def disable(self, disable: bool) -> None: ...
    @property
    def req_to_token_pool(self) -> Any:
        """SGLang's ``ReqToTokenPool``; its ``req_to_token`` table is read on checkpoints."""
    @req_to_token_pool.setter
    def req_to_token_pool(self, pool: Any) -> None: ...
    @property
    def _evictions(self) -> int:
        """Calls that evicted from the tree (the subclass counts them)."""
    @_evictions.setter
    def _evictions(self, n: int) -> None: ...
    def supports_prefix_sharing(self) -> bool: ...
    def match_prefix(self, params: Any) -> Any:
        """Longest cached whole-page prefix of ``params.key`` (capped at ``key.limit``) in its
        namespace (``key.extra_key``, ``key.cache_salt``), as SGLang's ``MatchResult``; splits
        the node it ends inside and refreshes the path's access time. ``ValueError`` for a
        bigram key."""
    def checkpoint(self, req: Any, *, up_to: int, **_kwargs: Any) -> None:
        """Inserts ``req``'s KV up to row position ``up_to`` (whole pages), frees the row's
        duplicates, moves ``req.lock`` to the inserted end (releases it when ``req`` has
        finished) and advances ``req.kv.cache_protected_len`` / ``cache_inserted_len``."""
    def prefix_device_indices(self, req: Any) -> Any:
        """The first ``req.prefix_len`` slots of the path to ``req.last_node``: an int64
        tensor on the KV device (the last one is kept and handed out again while its node
        lives)."""
    def evict(self, params: Any) -> Any:
        """Frees ``params.num_tokens`` tokens or as many as there are (the subclass's parked
        duplicates first, through its ``_evict_tokens``; then unlocked leaves in the policy's
        order), handed to the subclass's ``token_to_kv_pool_allocator``; SGLang's
        ``EvictResult``."""
    def evict_for_alloc(self, params: Any, *, allocation_reclaim_satisfied: Any = None) -> Any:
        """``evict(params)``; a joint-reclaim predicate raises ``NotImplementedError``."""
    def lock(self, node: Node) -> Any:
        """Protects the path to ``node``; SGLang's ``TreeLock``."""
    def unlock(self, lock: Any) -> None:
        """Undoes ``lock`` (nothing for None)."""
