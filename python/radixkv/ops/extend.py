"""Prefix-prefill ("extend") attention: the op, its host-side metadata check, its FLOP count.

The op itself lives with the others in ``_api`` (``radixkv.ops.extend_attention``): it validates
shapes, dtypes and devices without reading GPU memory, so it is safe inside CUDA-graph capture, and
with ``check=True`` (or ``RADIXKV_OPS_CHECK=1``) also what only the host can check by reading the
index tensors (each request's ``L_q <= L_k``, ``qo_indptr`` monotone and ending at ``N_q``). This
module re-exports it and adds the FLOP count the benchmarks report.

Shapes and dtypes (docs/contract.md §4, §5)::

    q           [N_q, H_q, D]                     float16 / bfloat16, D in {64, 128, 256}
    k_cache     [num_pages, page_size, H_kv, D]   (layout="bshd") or [num_pages, H_kv, page_size, D]
    v_cache     same as k_cache                    ("bhsd"); H_q % H_kv == 0
    qo_indptr   int32 [B + 1]                      request b's queries: rows qo_indptr[b]:qo_indptr[b+1]
    kv_indptr   int32 [B + 1]  + kv_indices int32 [nnz_pages]   (CSR), or
    block_tables int32 [B, max_blocks]             (keyword)
    kv_lens     int32 [B]                          L_k per request, new tokens included
    returns     [N_q, H_q, D]                      q's dtype

Query i of request b (0 <= i < L_q) attends key j iff ``j <= i + (L_k - L_q)``. A request with
more queries than keys has no valid mask: ``check=True`` raises :class:`radixkv.InvalidArgument`
naming it; unchecked, the kernel fills that request's rows with NaN rather than garbage.
"""

from __future__ import annotations

from typing import Sequence

from radixkv.ops._api import check_extend_metadata, extend_attention

__all__ = ["check_extend_metadata", "extend_attention", "extend_flops"]


def extend_flops(extend_lens: Sequence[int], prefix_lens: Sequence[int], heads_q: int, head_dim: int) -> float:
    """FLOPs of the unmasked work: per request ``4 * E * (P + (E + 1) / 2) * head_dim * heads_q``.

    (Two matrix products of 2 FLOPs per multiply-add over the visible (query, key) pairs:
    E * P prefix pairs plus E * (E + 1) / 2 in the causal triangle.)
    """
    total = 0.0
    for e, p in zip(extend_lens, prefix_lens):
        total += 4.0 * e * (p + (e + 1) / 2.0) * head_dim * heads_q
    return total
