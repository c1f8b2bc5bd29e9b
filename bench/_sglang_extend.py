"""SGLang's Triton extend-attention kernel as a benchmark anchor (issue 5: ">= 2x SGLang's Triton
extend kernel where you can run it").

The kernel comes from the bundle bench/setup_sglang_extend.sh makes in .anchors/sglang_triton
(sglang 0.5.23's modules, unchanged, with stand-ins for two platform-query modules). It is
called as SGLang's Triton attention backend calls it in a normal extend step: the pool is token
slots ([slots, H_kv, D], page size 1: a paged pool is viewed that way, slot = page * ps + offset),
the cached prefix is read through (kv_indptr, kv_indices) over prefix tokens only, and the new
tokens' K/V come as contiguous [N, H_kv, D] tensors (SGLang's scheduler has them at hand from the
QKV projection; here they are gathered from the pool once, outside the timing).

    fn = load()                      # None if the bundle or triton is missing
    run = runner(fn, k_cache, v_cache, cell, prefix, extend, sm_scale)   # -> callable -> out

Self-test on CPU with Triton's interpreter (no GPU):
    TRITON_INTERPRET=1 python bench/_sglang_extend.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional

BUNDLE = Path(__file__).resolve().parents[1] / ".anchors" / "sglang_triton"


def load() -> Optional[Callable[..., Any]]:
    """SGLang's ``extend_attention_fwd``, or None (with the reason on stderr)."""
    if not BUNDLE.is_dir():
        print(f"[sglang anchor] {BUNDLE} missing (bash bench/setup_sglang_extend.sh)", file=sys.stderr)
        return None
    if str(BUNDLE) not in sys.path:
        sys.path.insert(0, str(BUNDLE))
    try:
        from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        print(f"[sglang anchor] import failed: {exc!r}", file=sys.stderr)
        return None
    return extend_attention_fwd


def token_slots(kv_indptr: Any, kv_indices: Any, kv_lens: Any, page_size: int) -> list[Any]:
    """Per request, the slot of each of its kv_len tokens (slot = page * page_size + offset)."""
    import torch  # noqa: PLC0415

    out = []
    ptr = kv_indptr.tolist()
    for b, n in enumerate(kv_lens.tolist()):
        pages = kv_indices[ptr[b]:ptr[b + 1]].long()
        t = torch.arange(n, device=kv_indices.device)
        out.append(pages[t // page_size] * page_size + t % page_size)
    return out


def runner(fn: Callable[..., Any], k_cache: Any, v_cache: Any, cell: dict[str, Any], prefix: int,
           extend: int, sm_scale: float) -> Callable[[], Any]:
    """A call of SGLang's kernel on one benchmark cell (every request: ``prefix`` cached tokens
    then ``extend`` new ones; ``cell`` holds q, qo_indptr, kv_indptr, kv_indices, kv_lens of the
    paged pool ``k_cache``/``v_cache`` [pages, page_size, H_kv, D])."""
    import torch  # noqa: PLC0415

    page_size, h_kv, dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    k_buf = k_cache.view(-1, h_kv, dim)
    v_buf = v_cache.view(-1, h_kv, dim)
    slots = token_slots(cell["kv_indptr"], cell["kv_indices"], cell["kv_lens"], page_size)
    new = torch.cat([s[prefix:] for s in slots])
    k_ext, v_ext = k_buf[new].contiguous(), v_buf[new].contiguous()
    batch = len(slots)
    dev = k_cache.device
    pre_indptr = torch.arange(batch + 1, dtype=torch.int32, device=dev) * prefix
    pre_indices = (torch.cat([s[:prefix] for s in slots]) if prefix else
                   torch.zeros(1, dtype=torch.int64, device=dev)).to(torch.int32)
    q = cell["q"]
    out = torch.empty_like(q)
    qo_indptr = cell["qo_indptr"]

    def call() -> Any:
        fn(q, k_ext, v_ext, out, k_buf, v_buf, qo_indptr, pre_indptr, pre_indices, None, True,
           None, extend, 1.0, 1.0, sm_scale=sm_scale)
        return out

    return call


def _selftest() -> None:
    """Tiny case on CPU (TRITON_INTERPRET=1) against a direct float64 computation: checks that
    the call passes the right tensors (scattered pages of 4 slots, prefix 19, extend 7, GQA 2)."""
    import math

    import torch

    fn = load()
    assert fn is not None, "bundle missing"
    torch.manual_seed(0)
    # float32: Triton's CPU interpreter computes bf16 through NumPy, which has no bf16 (garbage).
    dt = torch.float32
    batch, prefix, extend, ps, h_q, h_kv, dim = 2, 19, 7, 4, 4, 2, 64
    kv_len = prefix + extend
    n_pages = -(-kv_len // ps)
    num_pages = batch * n_pages + 3
    k = torch.randn(num_pages, ps, h_kv, dim, dtype=dt)
    v = torch.randn(num_pages, ps, h_kv, dim, dtype=dt)
    perm = torch.randperm(num_pages)[: batch * n_pages].to(torch.int32)
    cell = {
        "q": torch.randn(batch * extend, h_q, dim, dtype=dt),
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32) * extend,
        "kv_indptr": torch.arange(batch + 1, dtype=torch.int32) * n_pages,
        "kv_indices": perm,
        "kv_lens": torch.full((batch,), kv_len, dtype=torch.int32),
    }
    scale = 1 / math.sqrt(dim)
    got = runner(fn, k, v, cell, prefix, extend, scale)().double()
    slots = token_slots(cell["kv_indptr"], cell["kv_indices"], cell["kv_lens"], ps)
    kf, vf = k.view(-1, h_kv, dim).double(), v.view(-1, h_kv, dim).double()
    worst = 0.0
    for b in range(batch):
        qb = cell["q"][b * extend:(b + 1) * extend].double()  # [E, Hq, D]
        kb = kf[slots[b]].repeat_interleave(h_q // h_kv, 1)  # [L, Hq, D]
        vb = vf[slots[b]].repeat_interleave(h_q // h_kv, 1)
        s = torch.einsum("ehd,lhd->hel", qb, kb) * scale
        i = torch.arange(extend)[:, None]
        j = torch.arange(kv_len)[None, :]
        s = s.masked_fill(j > i + prefix, float("-inf"))
        ref = torch.einsum("hel,lhd->ehd", s.softmax(-1), vb)
        mine = got[b * extend:(b + 1) * extend]
        worst = max(worst, float((mine - ref).norm() / ref.norm()))
    print(f"sglang anchor self-test: rel err {worst:.2e} vs float64")
    assert worst < 2e-2, worst


if __name__ == "__main__":
    _selftest()
