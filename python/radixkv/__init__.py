"""radixkv: the KV-cache layer of an LLM serving engine.

The Rust core (``radixkv._core``) owns all state: :class:`TokenPool`, :class:`RadixCache`,
:class:`BlockAllocator` and the batch metadata builders. ``radixkv.ops`` holds the attention
kernels (loaded lazily; a pure-torch reference is used where no GPU is present).
"""

from __future__ import annotations

from radixkv._core import (
    AllBlocksCleared,
    BlockAllocator,
    BlockRemoved,
    BlockStored,
    DoubleFree,
    InvalidArgument,
    InvariantViolation,
    Match,
    Node,
    NotLocked,
    OutOfBlocks,
    OutOfSlots,
    RadixCache,
    RadixKVError,
    StaleHandle,
    TokenPool,
    UnknownSequence,
    __version__,
    build_block_table_metadata,
    build_decode_metadata,
    build_extend_metadata,
    build_paged_extend_metadata,
)
from radixkv.metadata import BatchMetadata, BlockTableMetadata, DecodeMetadata, ExtendMetadata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from radixkv import ops


def __getattr__(name: str) -> object:
    # `radixkv.ops` imports torch; load it on first use so `import radixkv` stays light.
    if name == "ops":
        import importlib

        return importlib.import_module("radixkv.ops")
    raise AttributeError(f"module 'radixkv' has no attribute {name!r}")


__all__ = [
    "AllBlocksCleared",
    "BatchMetadata",
    "BlockAllocator",
    "BlockRemoved",
    "BlockStored",
    "BlockTableMetadata",
    "DecodeMetadata",
    "DoubleFree",
    "ExtendMetadata",
    "InvalidArgument",
    "InvariantViolation",
    "Match",
    "Node",
    "NotLocked",
    "OutOfBlocks",
    "OutOfSlots",
    "RadixCache",
    "RadixKVError",
    "StaleHandle",
    "TokenPool",
    "UnknownSequence",
    "__version__",
    "build_block_table_metadata",
    "build_decode_metadata",
    "build_extend_metadata",
    "build_paged_extend_metadata",
]
