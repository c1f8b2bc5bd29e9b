"""Pure-torch reference implementations of the radixkv kernels (docs/contract.md §4, §5).

These are the ground truth the GPU kernels are tested against, and what ``radixkv.ops`` runs when no
GPU extension is available. They favour clarity over speed: one Python loop over requests, float32
math, no fused tricks. Every function takes the same arguments as its kernel counterpart.

Layouts (``layout=``): ``"bshd"`` caches are ``[num_pages, page_size, H_kv, D]``, ``"bhsd"`` caches
are ``[num_pages, H_kv, page_size, D]``; ``page_size`` is read from the shape. Pages of a request are
given either in CSR form (``kv_indptr`` ``[B+1]``, ``kv_indices`` ``[nnz_pages]``) or as a block table
(``block_tables`` ``[B, max_blocks]``); ``kv_lens[b]`` counts valid tokens, so the last page of
request b holds ``(kv_lens[b] - 1) % page_size + 1`` of them.

Bad metadata is handled as the kernels handle it (``hip/guard.h``), and recorded in the same
status word (``radixkv.ops.take_errors``): a CSR row is clamped to ``kv_indices``, ``kv_lens`` to
``[0, tokens its pages hold]``, a key on a page outside the pool is dropped (decode) or reads zeros
(extend), a request whose query rows are not inside q is skipped (its rows stay zero), one with
more queries than keys gets NaN rows, and out-of-range slots and copy pairs are skipped.

FP8 caches (``torch.float8_e4m3fn`` / ``torch.float8_e5m2``) come with ``k_scale`` / ``v_scale``:
float32 tensors of shape ``[]`` (per tensor) or ``[H_kv]`` (per KV head), stored value x scale =
real value. :func:`store_kv` quantises ``value / scale`` (round to nearest even, saturating to the
format's largest finite value); the attention ops dequantise the gathered rows in float32. A scale
that is not finite and > 0 is used as NaN and recorded, as the kernels do (:func:`checked_scales`).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from radixkv.ops import _status

LAYOUTS = ("bshd", "bhsd")

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}

__all__ = [
    "FP8_DTYPES",
    "FP8_MAX",
    "LAYOUTS",
    "cache_dims",
    "dequantize",
    "copy_blocks",
    "extend_attention",
    "gather_kv",
    "paged_decode",
    "clamped_request",
    "quantize",
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
    """View of the cache as ``[num_pages, page_size, H_kv, D]`` (bhsd is permuted, not copied).
    FP8 caches are viewed as uint8 (indexing is defined for every integer type)."""
    if cache.dtype in FP8_DTYPES:
        cache = cache.view(torch.uint8)
    return cache if layout == "bshd" else cache.permute(0, 2, 1, 3)


def _head_scale(scale: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A ``[]`` or ``[H_kv]`` scale as float32 broadcasting over ``[..., H_kv, D]``."""
    s = scale.to(device, torch.float32)
    return s if s.dim() == 0 else s.reshape(-1, 1)


def checked_scales(op: str, device: torch.device, k_scale: Optional[torch.Tensor],
                   v_scale: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The scales as the kernels use them: an entry that is not finite and > 0 becomes NaN (so what
    it touches is NaN, never plausible numbers) and is recorded as ``(op, "k_scale")`` /
    ``(op, "v_scale")`` in word 2 of ``device``'s status (``hip/guard.h`` Extra)."""
    out = []
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is not None:
            good = torch.isfinite(s) & (s > 0)
            if not bool(good.all()):
                _status.record_extra(device, op, name)
                s = torch.where(good, s, torch.full_like(s, float("nan")))
        out.append(s)
    return out[0], out[1]


def quantize(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` ``[..., H_kv, D]`` -> FP8 ``dtype``: ``x / scale`` in float32, saturated, rounded to
    nearest even (what store_kv writes)."""
    lim = FP8_MAX[dtype]
    return (x.float() / _head_scale(scale, x.device)).clamp(-lim, lim).to(dtype)


def dequantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """FP8 ``x`` ``[..., H_kv, D]`` -> float32 real values (``x * scale``)."""
    return x.float() * _head_scale(scale, x.device)


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


def clamped_request(
    b: int,
    kv_len: int,
    kv_indptr: Optional[torch.Tensor],
    kv_indices: Optional[torch.Tensor],
    block_tables: Optional[torch.Tensor],
    page_size: int,
) -> tuple[torch.Tensor, int, int]:
    """``(pages, length, checks)`` of request ``b`` as the kernels read it: its CSR row clamped to
    ``kv_indices`` (or its whole block-table row), ``kv_len`` clamped to ``[0, len(pages) *
    page_size]``, and the ``_status.CHECK_BIT`` bits of what was wrong."""
    checks = 0
    if block_tables is not None:
        row = block_tables[b].to("cpu", torch.int64)
    else:
        assert kv_indptr is not None and kv_indices is not None
        nnz = kv_indices.numel()
        s0, s1 = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if s0 < 0 or s1 < s0:
            checks |= _status.CHECK_BIT["indptr_order"]
        if s1 > nnz:
            checks |= _status.CHECK_BIT["indptr_overrun"]
        lo = min(max(s0, 0), nnz)
        hi = min(max(s1, lo), nnz)
        row = kv_indices[lo:hi].to("cpu", torch.int64)
    cap = row.numel() * page_size
    if kv_len < 0:
        checks |= _status.CHECK_BIT["len_negative"]
        kv_len = 0
    elif kv_len > cap:
        checks |= _status.CHECK_BIT["len_beyond_pages"]
        kv_len = cap
    return row, kv_len, checks


def _gather_valid(cache: torch.Tensor, pages: torch.Tensor, kv_len: int,
                  layout: str, scale: Optional[torch.Tensor] = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`gather_kv`, for pages that may lie outside the pool: rows on such pages are
    zeros; also returns which rows were on a valid page (bool ``[kv_len]``)."""
    num_pages, page_size, heads, dim = cache_dims(cache, layout)
    pos = torch.arange(kv_len, dtype=torch.int64)
    page = pages[pos // page_size] if kv_len else pos
    ok = (page >= 0) & (page < num_pages)
    safe = torch.where(ok, page, torch.zeros_like(page)).to(cache.device)
    rows = _token_view(cache, layout)[safe, (pos % page_size).to(cache.device)]
    if cache.dtype in FP8_DTYPES:
        if scale is None:
            raise ValueError(f"an FP8 cache ({cache.dtype}) needs its scale")
        rows = dequantize(rows.view(cache.dtype).reshape(kv_len, heads, dim), scale)
    # (where, not a product: a NaN row on a dropped page must not leak in)
    rows = torch.where(ok.to(cache.device).view(-1, 1, 1), rows.float().reshape(kv_len, heads, dim),
                       torch.zeros((), device=cache.device))
    return rows, ok.to(cache.device)


def gather_kv(
    cache: torch.Tensor, pages: torch.Tensor, kv_len: int, layout: str = "bshd",
    scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Rows of one request in token order: ``[kv_len, H_kv, D]`` (float32; FP8 caches
    dequantised with ``scale``)."""
    _, page_size, heads, dim = cache_dims(cache, layout)
    tok = _token_view(cache, layout)
    pos = torch.arange(kv_len, dtype=torch.int64, device=cache.device)
    page = pages.to(cache.device)[pos // page_size] if kv_len else pos
    rows = tok[page, pos % page_size].reshape(kv_len, heads, dim)
    if cache.dtype in FP8_DTYPES:
        if scale is None:
            raise ValueError(f"an FP8 cache ({cache.dtype}) needs its scale")
        return dequantize(rows.view(cache.dtype), scale)
    return rows.float()


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
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
) -> None:
    """Write ``k``/``v`` ``[N, H_kv, D]`` into slots ``slots`` ``[N]`` (in place).

    Slot s is page ``s // page_size``, offset ``s % page_size``. A negative slot skips its token
    (padding, as in vLLM's slot_mapping); a slot past the pool is skipped and recorded. FP8
    caches store :func:`quantize` of the values.
    """
    num_pages, page_size, _, _ = cache_dims(k_cache, layout)
    s = slots.to(k_cache.device, torch.int64)
    over = s >= num_pages * page_size
    if bool(over.any()):
        _status.record(k_cache.device, "store_kv", _status.CHECK_BIT["slot_range"])
    keep = (s >= 0) & ~over
    s = s[keep]
    page, off = s // page_size, s % page_size
    if k_cache.dtype in FP8_DTYPES:
        if k_scale is None or v_scale is None:
            raise ValueError(f"an FP8 cache ({k_cache.dtype}) needs k_scale and v_scale")
        if bool(keep.any()):  # the kernel reads the scales for the tokens it stores
            ks, vs = checked_scales("store_kv", k_cache.device, k_scale, v_scale)
            assert ks is not None and vs is not None
            k_scale, v_scale = ks, vs
        kq = quantize(k[keep], k_scale, k_cache.dtype).view(torch.uint8)
        vq = quantize(v[keep], v_scale, v_cache.dtype).view(torch.uint8)
        _token_view(k_cache, layout)[page, off] = kq
        _token_view(v_cache, layout)[page, off] = vq
        return
    _token_view(k_cache, layout)[page, off] = k[keep].to(k_cache.dtype)
    _token_view(v_cache, layout)[page, off] = v[keep].to(v_cache.dtype)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor, pairs: torch.Tensor) -> None:
    """Copy whole pages ``pairs[i, 0] -> pairs[i, 1]`` in both caches (in place).

    All sources are read before any destination is written; destinations must be distinct and must
    not be sources (copy-on-write pairs always satisfy this). A pair naming a page outside the pool
    is skipped and recorded.
    """
    p = pairs.to(k_cache.device, torch.int64).reshape(-1, 2)
    n = k_cache.shape[0]
    ok = ((p >= 0) & (p < n)).all(dim=1)
    if not bool(ok.all()):
        _status.record(k_cache.device, "copy_blocks", _status.CHECK_BIT["page_range"])
        p = p[ok]
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
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
    plan: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One query per request over its paged context. q ``[B, H_q, D]`` -> ``[B, H_q, D]`` (q.dtype).

    This is extend attention with one query per request: that query is the last position, so the
    shifted causal mask lets it see every key. A request with no key gets zeros; keys on pages
    outside the pool are left out. With a work ``plan`` (``radixkv.ops.decode_plan``) the result is
    computed as the kernels do: one softmax state per unit, merged per request
    (:func:`paged_decode_planned`).
    """
    if q.shape[0] > 0:
        k_scale, v_scale = checked_scales("paged_decode", q.device, k_scale, v_scale)
    if plan is not None:
        return paged_decode_planned(q, k_cache, v_cache, kv_indptr, kv_indices, kv_lens, sm_scale,
                                    plan, block_tables=block_tables, layout=layout,
                                    k_scale=k_scale, v_scale=v_scale)
    qo_indptr = torch.arange(q.shape[0] + 1, dtype=torch.int32)
    return _attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens, sm_scale,
                      block_tables, layout, decode=True,
                      k_scale=k_scale, v_scale=v_scale)


def _group_agrees(units: torch.Tensor, rows: torch.Tensor, u: int, b: int, batch: int) -> bool:
    """Whether unit row ``u`` (of request ``b``) belongs to a merge group the kernels accept
    (hip/paged_decode_mma.cuh ``group_rows_agree``): a request cut in ``n > 1`` units (counts
    clamped to [1, 256]) has its first unit row ``first_unit[b]`` inside the plan and rows
    ``[first, first + n)`` all naming ``b`` with ``n`` units, ``u`` among them."""
    cap = units.shape[0]

    def count(r: int) -> int:
        return min(max(int(units[r, 3]), 1), 256)

    n = count(u)
    if n == 1:
        return True
    raw = int(rows[4 * cap + b])
    hi = cap - n
    first = min(max(raw, 0), max(hi, 0))
    if raw < 0 or raw > hi or not first <= u < first + n:
        return False
    return all(int(units[r, 0]) == b and count(r) == n for r in range(first, first + n))


def paged_decode_planned(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: Optional[torch.Tensor],
    kv_indices: Optional[torch.Tensor],
    kv_lens: Optional[torch.Tensor],
    sm_scale: Optional[float],
    plan: torch.Tensor,
    *,
    block_tables: Optional[torch.Tensor] = None,
    layout: str = "bshd",
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decode through a work plan, the way the kernels run it: each unit row ``(request,
    kv_start, kv_end, units)`` (hip/paged_decode.h) yields a softmax state ``(m, l, o)`` over its
    keys (its range clamped to the request's tokens), and a request's states are merged by
    ``o = sum_u l_u exp(m_u - M) o_u / sum_u l_u exp(m_u - M)``. Rows naming no request of the
    batch are skipped and recorded (``plan`` in word 2 of the status), and so is a request whose
    unit rows disagree (:func:`_group_agrees`; its states are merged here, the kernels leave its
    output undefined). Keys no unit covers are left out, as the kernels leave them."""
    assert kv_lens is not None
    _, page_size, _, dim = cache_dims(k_cache, layout)
    scale = 1.0 / math.sqrt(dim) if sm_scale is None else float(sm_scale)
    batch, h_q = q.shape[0], q.shape[1]
    rows = plan.to("cpu", torch.int64)
    cap = (rows.numel() - batch) // 4
    units = rows[: 4 * cap].view(cap, 4)
    lens = kv_lens.to("cpu", torch.int64)
    states: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = [[] for _ in range(batch)]
    checks, bad_plan = 0, False
    for u in range(cap):
        b, s0, s1, cnt = (int(x) for x in units[u])
        if not 0 <= b < batch:
            bad_plan |= b != -1
            continue
        bad_plan |= s0 < 0 or s1 < s0 or not 1 <= cnt <= 256
        bad_plan |= not _group_agrees(units, rows, u, b, batch)
        pages, n_k, c = clamped_request(b, int(lens[b]), kv_indptr, kv_indices, block_tables, page_size)
        checks |= c
        lo = min(max(s0, 0), n_k)
        hi = min(max(s1, lo), n_k)
        k, ok = _gather_valid(k_cache, pages, n_k, layout, k_scale)
        v, _ = _gather_valid(v_cache, pages, n_k, layout, v_scale)
        if not bool(ok[lo:hi].all()):
            checks |= _status.CHECK_BIT["page_range"]
        group = h_q // k.shape[1]
        kk = k[lo:hi].repeat_interleave(group, dim=1)  # [n, H_q, D]
        vv = v[lo:hi].repeat_interleave(group, dim=1)
        sc = torch.einsum("hd,khd->hk", q[b].float(), kk) * scale  # [H_q, n]
        sc = sc.masked_fill(~ok[lo:hi].unsqueeze(0), float("-inf"))
        m = sc.amax(dim=-1) if sc.shape[-1] else torch.full((h_q,), float("-inf"), device=q.device)
        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        pw = torch.exp(sc - m_safe.unsqueeze(1))
        l_sum = pw.sum(dim=-1)
        o = torch.einsum("hk,khd->hd", pw, vv) / torch.where(l_sum > 0, l_sum, 1.0).unsqueeze(1)
        states[b].append((m, l_sum, o))
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b, st in enumerate(states):
        if not st:
            continue
        m = torch.stack([x[0] for x in st])  # [U, H_q]
        big = m.amax(dim=0)
        big = torch.where(torch.isinf(big), torch.zeros_like(big), big)
        w = torch.stack([x[1] for x in st]) * torch.exp(m - big)  # empty units: l = 0
        total = w.sum(dim=0)
        o = (w.unsqueeze(-1) * torch.stack([x[2] for x in st])).sum(dim=0)
        out[b] = o / torch.where(total > 0, total, 1.0).unsqueeze(-1)
    _status.record(q.device, "paged_decode", checks)
    if bad_plan:
        _status.record_extra(q.device, "paged_decode", "plan")
    return out.to(q.dtype)


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
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Prefix-prefill attention. q ``[N_q, H_q, D]`` -> ``[N_q, H_q, D]`` (q.dtype).

    Request b owns queries ``qo_indptr[b]:qo_indptr[b+1]`` (L_q of them), which are the last L_q
    positions of its ``kv_lens[b]`` (= L_k) tokens: query i may see key j iff ``j <= i + L_k - L_q``.
    A request with L_q > L_k gets NaN rows; keys on pages outside the pool read zeros.
    """
    if q.shape[0] > 0 and qo_indptr.numel() > 1:
        k_scale, v_scale = checked_scales("extend_attention", q.device, k_scale, v_scale)
    return _attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens, sm_scale,
                      block_tables, layout, decode=False, k_scale=k_scale, v_scale=v_scale)


def _attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, qo_indptr: torch.Tensor,
               kv_indptr: Optional[torch.Tensor], kv_indices: Optional[torch.Tensor],
               kv_lens: Optional[torch.Tensor], sm_scale: Optional[float],
               block_tables: Optional[torch.Tensor], layout: str, decode: bool,
               k_scale: Optional[torch.Tensor] = None,
               v_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    assert kv_lens is not None
    _, page_size, _, dim = cache_dims(k_cache, layout)
    scale = 1.0 / math.sqrt(dim) if sm_scale is None else float(sm_scale)
    lens = kv_lens.to("cpu", torch.int64)
    qo = qo_indptr.to("cpu", torch.int64)
    n_rows = q.shape[0]
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    checks = 0
    for b in range(lens.numel()):
        q0, q1 = int(qo[b]), int(qo[b + 1])
        pages, n_k, c = clamped_request(b, int(lens[b]), kv_indptr, kv_indices, block_tables, page_size)
        checks |= c
        if not decode and (q0 < 0 or q1 < q0 or q1 > n_rows):
            checks |= _status.CHECK_BIT["qo_indptr"]
            continue  # the kernel skips a request whose rows are not inside q
        n_q = q1 - q0
        if n_q == 0:
            continue
        if not decode and n_q > n_k:
            if int(lens[b]) >= 0:
                checks |= _status.CHECK_BIT["queries_exceed_keys"]
            out[q0:q1] = float("nan")
            continue
        k, ok = _gather_valid(k_cache, pages, n_k, layout, k_scale)
        v, _ = _gather_valid(v_cache, pages, n_k, layout, v_scale)
        if not bool(ok.all()):
            checks |= _status.CHECK_BIT["page_range"]
        i = torch.arange(n_q, device=q.device).unsqueeze(1)
        j = torch.arange(n_k, device=q.device).unsqueeze(0)
        mask = j <= i + (n_k - n_q)
        if decode:
            mask = mask & ok.unsqueeze(0)
        out[q0:q1] = _attend(q[q0:q1], k, v, scale, mask)
    _status.record(q.device, "paged_decode" if decode else "extend_attention", checks)
    return out.to(q.dtype)
