"""radixkv attention kernels as torch custom ops (docs/contract.md §4, §5).

    import radixkv.ops as ops
    ops.store_kv(k_cache, v_cache, k, v, slots)
    out = ops.paged_decode(q, k_cache, v_cache, kv_indptr, kv_indices, kv_lens)
    out = ops.extend_attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens)
    ops.copy_blocks(k_cache, v_cache, pairs)

FP8 KV caches (``torch.float8_e4m3fn`` / ``torch.float8_e5m2``): pass ``k_scale=`` / ``v_scale=``
(float32 ``[]`` or ``[H_kv]`` on the caches' device; stored value x scale = real value) to
store_kv (which quantises fp16/bf16 K/V), paged_decode and extend_attention.

Importing this package needs torch but no GPU toolchain. The HIP extension (``hip/``) is built and
loaded on the first call whose tensors live on a GPU (``radixkv.ops.loader``). When tensors are on
the CPU, or no extension can be built, the pure-torch reference (``radixkv.ops.reference``) runs
instead and a warning is issued once. ``RADIXKV_OPS_BACKEND`` forces a choice: ``auto`` (default),
``reference``, or ``extension`` (a failed build then raises instead of falling back).

Kernel inputs are checked on the device, always: out-of-range or inconsistent metadata is clamped
or skipped (never read outside the cache) and recorded per device; ``ops.take_errors()`` returns
and clears those records (it synchronises), and ``RADIXKV_OPS_CHECK=1`` raises on them.
"""

from __future__ import annotations

from radixkv.ops import reference
from radixkv.ops._status import KernelFault, take_errors, take_kernel_log
from radixkv.ops._api import (
    ExtendPlan,
    SUPPORTED_DTYPES,
    SUPPORTED_HEAD_DIMS,
    SUPPORTED_KV_DTYPES,
    SUPPORTED_PAGE_SIZES,
    backend,
    copy_blocks,
    decode_counter_words,
    decode_plan,
    decode_slots,
    extend_attention,
    extend_plan,
    extend_tile_rows,
    paged_decode,
    store_kv,
)

__all__ = [
    "ExtendPlan",
    "KernelFault",
    "SUPPORTED_DTYPES",
    "SUPPORTED_HEAD_DIMS",
    "SUPPORTED_KV_DTYPES",
    "SUPPORTED_PAGE_SIZES",
    "backend",
    "copy_blocks",
    "decode_counter_words",
    "decode_plan",
    "decode_slots",
    "extend_attention",
    "extend_plan",
    "extend_tile_rows",
    "paged_decode",
    "reference",
    "store_kv",
    "take_errors",
    "take_kernel_log",
]
