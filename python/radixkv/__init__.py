"""radixkv: the KV-cache layer of an LLM serving engine.

The Rust core (``radixkv._core``) owns all state: :class:`TokenPool`, :class:`RadixCache`,
:class:`BlockAllocator` and the batch metadata builders. ``radixkv.ops`` holds the attention
kernels (loaded lazily; a pure-torch reference is used where no GPU is present).
"""

from __future__ import annotations

from radixkv._core import (
    DoubleFree,
    InvalidArgument,
    InvariantViolation,
    NotLocked,
    OutOfBlocks,
    OutOfSlots,
    RadixKVError,
    StaleHandle,
    UnknownSequence,
    __version__,
)

__all__ = [
    "DoubleFree",
    "InvalidArgument",
    "InvariantViolation",
    "NotLocked",
    "OutOfBlocks",
    "OutOfSlots",
    "RadixKVError",
    "StaleHandle",
    "UnknownSequence",
    "__version__",
]
