"""Type stub of the compiled extension ``radixkv._core`` (checked by ``mypy.stubtest``)."""

from typing import Union, final

import numpy as np
import numpy.typing as npt

# Token / slot sequences: a list or tuple of ints, a 1-D NumPy integer array, or a 1-D CPU torch
# tensor of an integer dtype (typed loosely so torch stays optional).
_IntSeq = Union[list[int], tuple[int, ...], npt.NDArray[np.integer], object]
# None, a str, or a tuple of str / None. Equal namespaces share prefixes; different ones never
# do, whatever their tokens.
_Namespace = Union[None, str, tuple[Union[str, None], ...]]
_Int32Array = npt.NDArray[np.int32]

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
    def alloc(self, n: int) -> _Int32Array:
        """``n`` slot ids (int32); ``OutOfSlots`` if fewer than ``n`` are available."""
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
    inserts; eviction retires it and every use then raises ``StaleHandle``."""

    @property
    def lock_ref(self) -> int: ...
    @property
    def last_access(self) -> int: ...
    @property
    def hit_count(self) -> int: ...
    @property
    def length(self) -> int:
        """Tokens on this node's own edge."""
    @property
    def depth(self) -> int:
        """Tokens from the root to this path end."""
    @property
    def num_children(self) -> int: ...
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
    def slots(self) -> _Int32Array: ...
    @property
    def node(self) -> Node: ...

@final
class RadixCache:
    """Radix prefix cache over a ``TokenPool``, or over caller-owned slots (``pool=None``).

    ``page_size > 1``: match and insert use only the first ``len(tokens) // page_size`` whole
    pages; the partial last page is ignored by both. ``insert`` returns the number of leading
    tokens already cached; the caller keeps (and frees) ``slots[:returned]`` and the slots of
    the partial last page. With a pool, each inserted page of slots must be one whole pool page
    in order, as ``alloc`` returns them, and must be allocated and not yet cached.
    """

    def __new__(cls, pool: TokenPool | None, page_size: int | None = None) -> RadixCache: ...
    def match_prefix(self, tokens: _IntSeq, namespace: _Namespace = None) -> Match:
        """Longest cached prefix (whole pages); splits the node the match ends inside, touches
        the path (LRU time, hit count)."""
    def peek_prefix(self, tokens: _IntSeq, namespace: _Namespace = None) -> int:
        """Hit length only; no split, no LRU or hit-count change."""
    def insert(self, tokens: _IntSeq, slots: _IntSeq, namespace: _Namespace = None) -> int: ...
    def lock(self, node: Node) -> None: ...
    def unlock(self, node: Node) -> None:
        """Undo one ``lock`` taken through this node; ``NotLocked`` if none is left."""
    def alloc(self, n: int) -> _Int32Array:
        """``n`` slots from the pool, evicting LRU leaves first if it is short. ``OutOfSlots``
        (nothing evicted) when the pool plus everything evictable is not enough."""
    def evict(self, num_tokens: int) -> int:
        """Evict whole LRU unlocked leaves until ``num_tokens`` are freed; the count freed."""
    def evict_slots(self, num_tokens: int) -> _Int32Array:
        """As ``evict``, returning the freed ids (with a pool they are already back in it)."""
    def path_slots(self, node: Node) -> _Int32Array: ...
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
    def num_nodes(self) -> int: ...
    @property
    def pool(self) -> TokenPool | None: ...
    def check(self) -> None:
        """Verify every invariant; ``InvariantViolation`` names the first broken one."""
    def dump(self) -> list[tuple[bytes, list[int], list[int], int, int, int]]:
        """Every node as (namespace, path tokens, own slots, lock_ref, last_access,
        hit_count), sorted."""
