"""Prefix-prefill ("extend") attention: the typed wrapper and its extend-specific checks.

``radixkv.ops.extend_attention`` (in ``_api``) validates shapes, dtypes and devices without reading
GPU memory, so it is safe inside CUDA-graph capture. This module adds what only the host can check
by reading the index tensors (each request's ``L_q <= L_k``, ``qo_indptr`` monotone and ending at
``N_q``), run when asked (``check=True``, or ``RADIXKV_OPS_CHECK=1``), plus the FLOP count the
benchmarks report.

Shapes and dtypes (SPEC §4, §5)::

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

import os
from typing import Optional, Sequence

import torch

from radixkv import InvalidArgument
from radixkv.ops import _api

__all__ = ["check_extend_metadata", "extend_attention", "extend_flops"]


def check_extend_metadata(qo_indptr: torch.Tensor, kv_lens: torch.Tensor, num_q_tokens: int) -> None:
    """Host-side checks of the extend metadata (reads the tensors: synchronises with the GPU).

    Raises :class:`radixkv.InvalidArgument` naming the first offending request.
    """
    qo = qo_indptr.detach().to("cpu", torch.int64)
    lk = kv_lens.detach().to("cpu", torch.int64)
    if qo.numel() == 0:
        raise InvalidArgument("qo_indptr must have at least one entry (B + 1 for B requests)")
    if int(qo[0]) != 0:
        raise InvalidArgument(f"qo_indptr must start at 0, got {int(qo[0])}")
    lq = qo[1:] - qo[:-1]
    if (lq < 0).any():
        b = int((lq < 0).nonzero()[0])
        raise InvalidArgument(f"qo_indptr decreases at request {b}: {int(qo[b])} -> {int(qo[b + 1])}")
    if int(qo[-1]) != num_q_tokens:
        raise InvalidArgument(f"qo_indptr ends at {int(qo[-1])} but q has {num_q_tokens} rows")
    if (lk < 0).any():
        b = int((lk < 0).nonzero()[0])
        raise InvalidArgument(f"kv_lens[{b}] = {int(lk[b])} is negative")
    bad = lq > lk
    if bad.any():
        b = int(bad.nonzero()[0])
        raise InvalidArgument(
            f"request {b} has more queries than keys: L_q = {int(lq[b])} > L_k = kv_lens[{b}] = "
            f"{int(lk[b])} (the keys must include the new tokens: L_k = prefix + L_q)"
        )


def extend_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: Optional[torch.Tensor] = None,
    kv_indices: Optional[torch.Tensor] = None,
    kv_lens: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    *,
    block_tables: Optional[torch.Tensor] = None,
    layout: str = "bshd",
    out: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
    check: Optional[bool] = None,
) -> torch.Tensor:
    """Prefix-prefill attention over the paged cache (see the module docstring for shapes).

    ``sm_scale`` defaults to ``1/sqrt(D)`` and must be positive. ``out`` (optional) receives the
    result. ``max_q_len`` bounds every ``L_q`` (a smaller grid; default ``N_q``). ``check``: read the
    index tensors on the host and reject bad metadata (default: ``RADIXKV_OPS_CHECK=1``); it
    synchronises, so leave it off inside CUDA-graph capture.
    """
    if sm_scale is not None and not float(sm_scale) > 0.0:
        raise InvalidArgument(f"sm_scale must be > 0, got {sm_scale!r}")
    if max_q_len is not None and int(max_q_len) < 0:
        raise InvalidArgument(f"max_q_len must be >= 0, got {max_q_len}")
    do_check = os.environ.get("RADIXKV_OPS_CHECK") == "1" if check is None else bool(check)
    if do_check:
        if not isinstance(qo_indptr, torch.Tensor) or not isinstance(kv_lens, torch.Tensor):
            raise InvalidArgument("qo_indptr and kv_lens must be int32 tensors")
        if not isinstance(q, torch.Tensor) or q.dim() != 3:
            raise InvalidArgument(f"q must be [N_q, H_q, D], got {tuple(getattr(q, 'shape', ()))}")
        if kv_lens.numel() != qo_indptr.numel() - 1:
            raise InvalidArgument(
                f"kv_lens has {kv_lens.numel()} entries, qo_indptr {qo_indptr.numel()} (expected B, B + 1)"
            )
        check_extend_metadata(qo_indptr, kv_lens, q.shape[0])
        if max_q_len is not None:
            lq = qo_indptr.detach().cpu().long().diff()
            if lq.numel() and int(lq.max()) > int(max_q_len):
                raise InvalidArgument(f"max_q_len = {max_q_len} but a request has L_q = {int(lq.max())}")
    return _api.extend_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens, sm_scale,
        block_tables=block_tables, layout=layout, out=out, max_q_len=max_q_len,
    )


def extend_flops(extend_lens: Sequence[int], prefix_lens: Sequence[int], heads_q: int, head_dim: int) -> float:
    """FLOPs of the unmasked work: per request ``4 * E * (P + (E + 1) / 2) * head_dim * heads_q``.

    (Two matrix products of 2 FLOPs per multiply-add over the visible (query, key) pairs:
    E * P prefix pairs plus E * (E + 1) / 2 in the causal triangle.)
    """
    total = 0.0
    for e, p in zip(extend_lens, prefix_lens):
        total += 4.0 * e * (p + (e + 1) / 2.0) * head_dim * heads_q
    return total
