"""Pure-torch reference implementations of the radixkv kernels (docs/contract.md §4, §5).

These are the ground truth the GPU kernels are tested against, and what ``radixkv.ops`` runs when no
GPU extension is available. They favour clarity over speed: one Python loop over requests, float32
math, no fused tricks. Every function takes the same arguments as its kernel counterpart.

Layouts (``layout=``): ``"bshd"`` caches are ``[num_pages, page_size, H_kv, D]``, ``"bhsd"`` caches
are ``[num_pages, H_kv, page_size, D]``; ``page_size`` is read from the shape. Pages of a request are
given either in CSR form (``kv_indptr`` ``[B+1]``, ``kv_indices`` ``[nnz_pages]``) or as a block table
(``block_tables`` ``[B, max_blocks]``); ``kv_lens[b]`` counts valid tokens, so the last page of
request b holds ``(kv_lens[b] - 1) % page_size + 1`` of them.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

LAYOUTS = ("bshd", "bhsd")

__all__ = [
    "LAYOUTS",
    "cache_dims",
    "copy_blocks",
    "extend_attention",
    "gather_kv",
    "paged_decode",
    "request_pages",
    "store_kv",
]


def cache_dims(cache: torch.Tensor, layout: str = "bshd") -> tuple[int, int, int, int]:
    """Return ``(num_pages, page_size, H_kv, D)`` of a KV cache in ``layout``."""
    if layout == "bshd":
        num_pages, page_size, heads, dim = cache.shape
    elif layout == "bhsd":
        num_pages, heads, page_size, dim = cache.shape
    else:
        raise ValueError(f"unsupported layout: {layout!r} (supported: {LAYOUTS})")
    return int(num_pages), int(page_size), int(heads), int(dim)


def _token_view(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """View of the cache as ``[num_pages, page_size, H_kv, D]`` (bhsd is permuted, not copied)."""
    return cache if layout == "bshd" else cache.permute(0, 2, 1, 3)


def request_pages(
    b: int,
    kv_len: int,
    page_size: int,
    kv_indptr: Optional[torch.Tensor],
    kv_indices: Optional[torch.Tensor],
    block_tables: Optional[torch.Tensor],
) -> torch.Tensor:
    """Physical pages (int64, CPU) holding request ``b``'s first ``kv_len`` tokens."""
    n_pages = (kv_len + page_size - 1) // page_size
    if block_tables is not None:
        row = block_tables[b].to("cpu", torch.int64)
        return row[:n_pages]
    assert kv_indptr is not None and kv_indices is not None
    start = int(kv_indptr[b])
    end = int(kv_indptr[b + 1])
    if end - start < n_pages:
        raise ValueError(f"request {b}: kv_len {kv_len} needs {n_pages} pages, got {end - start}")
    return kv_indices[start : start + n_pages].to("cpu", torch.int64)


def gather_kv(
    cache: torch.Tensor, pages: torch.Tensor, kv_len: int, layout: str = "bshd"
) -> torch.Tensor:
    """Rows of one request in token order: ``[kv_len, H_kv, D]`` (float32)."""
    _, page_size, heads, dim = cache_dims(cache, layout)
    tok = _token_view(cache, layout)
    pos = torch.arange(kv_len, dtype=torch.int64, device=cache.device)
    page = pages.to(cache.device)[pos // page_size] if kv_len else pos
    rows = tok[page, pos % page_size]
    return rows.reshape(kv_len, heads, dim).float()


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Softmax attention in float32. q ``[L_q, H_q, D]``, k/v ``[L_k, H_kv, D]`` -> ``[L_q, H_q, D]``.

    Query head h reads KV head ``h // (H_q // H_kv)``. ``mask`` ``[L_q, L_k]`` (True = may attend).
    A query with no visible key gets zeros (the empty softmax state's output).
    """
    h_q, h_kv = q.shape[1], k.shape[1]
    group = h_q // h_kv
    kk = k.repeat_interleave(group, dim=1)  # [L_k, H_q, D]
    vv = v.repeat_interleave(group, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) * scale  # [H_q, L_q, L_k]
    if mask is not None:
        s = s.masked_fill(~mask.unsqueeze(0), float("-inf"))
    if s.shape[-1] == 0:
        return torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.einsum("hqk,khd->qhd", p, vv)


def store_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
    layout: str = "bshd",
) -> None:
    """Write ``k``/``v`` ``[N, H_kv, D]`` into slots ``slots`` ``[N]`` (in place).

    Slot s is page ``s // page_size``, offset ``s % page_size``. A negative slot skips its token
    (padding, as in vLLM's slot_mapping).
    """
    _, page_size, _, _ = cache_dims(k_cache, layout)
    s = slots.to(k_cache.device, torch.int64)
    keep = s >= 0
    s = s[keep]
    page, off = s // page_size, s % page_size
    _token_view(k_cache, layout)[page, off] = k[keep].to(k_cache.dtype)
    _token_view(v_cache, layout)[page, off] = v[keep].to(v_cache.dtype)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor, pairs: torch.Tensor) -> None:
    """Copy whole pages ``pairs[i, 0] -> pairs[i, 1]`` in both caches (in place).

    All sources are read before any destination is written; destinations must be distinct and must
    not be sources (copy-on-write pairs always satisfy this).
    """
    p = pairs.to(k_cache.device, torch.int64).reshape(-1, 2)
    src, dst = p[:, 0], p[:, 1]
    k_cache[dst] = k_cache[src].clone()
    v_cache[dst] = v_cache[src].clone()


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: Optional[torch.Tensor] = None,
    kv_indices: Optional[torch.Tensor] = None,
    kv_lens: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    *,
    block_tables: Optional[torch.Tensor] = None,
    layout: str = "bshd",
) -> torch.Tensor:
    """One query per request over its paged context. q ``[B, H_q, D]`` -> ``[B, H_q, D]`` (q.dtype).

    This is extend attention with one query per request: that query is the last position, so the
    shifted causal mask lets it see every key.
    """
    qo_indptr = torch.arange(q.shape[0] + 1, dtype=torch.int32)
    return extend_attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens,
                            sm_scale, block_tables=block_tables, layout=layout)


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
) -> torch.Tensor:
    """Prefix-prefill attention. q ``[N_q, H_q, D]`` -> ``[N_q, H_q, D]`` (q.dtype).

    Request b owns queries ``qo_indptr[b]:qo_indptr[b+1]`` (L_q of them), which are the last L_q
    positions of its ``kv_lens[b]`` (= L_k) tokens: query i may see key j iff ``j <= i + L_k - L_q``.
    """
    assert kv_lens is not None
    _, page_size, _, dim = cache_dims(k_cache, layout)
    scale = 1.0 / math.sqrt(dim) if sm_scale is None else float(sm_scale)
    lens = kv_lens.to("cpu", torch.int64)
    qo = qo_indptr.to("cpu", torch.int64)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(lens.numel()):
        n_k = int(lens[b])
        q0, q1 = int(qo[b]), int(qo[b + 1])
        n_q = q1 - q0
        if n_q == 0:
            continue
        pages = request_pages(b, n_k, page_size, kv_indptr, kv_indices, block_tables)
        k = gather_kv(k_cache, pages, n_k, layout)
        v = gather_kv(v_cache, pages, n_k, layout)
        i = torch.arange(n_q, device=q.device).unsqueeze(1)
        j = torch.arange(n_k, device=q.device).unsqueeze(0)
        mask = j <= i + (n_k - n_q)
        out[q0:q1] = _attend(q[q0:q1], k, v, scale, mask)
    return out.to(q.dtype)
