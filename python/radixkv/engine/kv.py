"""The KV pool tensors (one K and one V per layer, bshd ``[num_pages, page_size, H_kv, D]``) and
the per-step attention that writes into them and reads from them through ``radixkv.ops``."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

import torch

from radixkv.engine.model import ModelConfig
from radixkv.metadata import DecodeMetadata, ExtendMetadata


def select_ops(device: torch.device) -> ModuleType:
    """The kernels on a GPU; the pure-torch reference ops on the CPU."""
    if device.type == "cpu":
        from radixkv.ops import reference

        return reference
    import radixkv.ops

    return radixkv.ops


class KVPool:
    def __init__(self, config: ModelConfig, num_pages: int, page_size: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        shape = (num_pages, page_size, config.num_kv_heads, config.head_dim)
        self.num_pages = num_pages
        self.page_size = page_size
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.bytes_per_token = config.kv_bytes_per_token(dtype)

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def nbytes(self) -> int:
        return self.num_slots * self.bytes_per_token

    def copy_pages(self, ops: ModuleType, pairs: torch.Tensor) -> None:
        """Copy-on-write: ``pairs`` int32 ``[k, 2]`` (src, dst) pages, every layer."""
        for k, v in zip(self.k, self.v):
            ops.copy_blocks(k, v, pairs)


class StepAttention:
    """``attend(layer, q, k, v)`` for the model's forward over one step's rows: the first
    ``num_extend_rows`` are prefill chunks (extend attention), the rest decodes (paged decode).
    Each part stores its new K/V first."""

    def __init__(self, pool: KVPool, ops: ModuleType, extend: Optional[ExtendMetadata[torch.Tensor]],
                 decode: Optional[DecodeMetadata[torch.Tensor]], num_extend_rows: int) -> None:
        self.pool = pool
        self.ops = ops
        self.extend = extend
        self.decode = decode
        self.split = num_extend_rows
        self.max_q = extend.max_extend_len if extend is not None else 0

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.pool.k[layer], self.pool.v[layer]
        ops, s = self.ops, self.split
        e, d = self.extend, self.decode
        if e is not None and d is None:
            ops.store_kv(kc, vc, k, v, e.out_cache_loc)
            return ops.extend_attention(q, kc, vc, e.qo_indptr, e.kv_indptr, e.kv_indices,
                                        e.seq_lens, **self._max_q())
        if d is not None and e is None:
            ops.store_kv(kc, vc, k, v, d.out_cache_loc)
            return ops.paged_decode(q, kc, vc, d.kv_indptr, d.kv_indices, d.seq_lens, **self._plan())
        assert e is not None and d is not None
        out = torch.empty_like(q)
        ops.store_kv(kc, vc, k[:s], v[:s], e.out_cache_loc)
        ops.store_kv(kc, vc, k[s:], v[s:], d.out_cache_loc)
        out[:s] = ops.extend_attention(q[:s], kc, vc, e.qo_indptr, e.kv_indptr, e.kv_indices,
                                       e.seq_lens, **self._max_q())
        out[s:] = ops.paged_decode(q[s:], kc, vc, d.kv_indptr, d.kv_indices, d.seq_lens, **self._plan())
        return out

    def _plan(self) -> dict[str, Any]:
        # The work plan rides in the decode metadata (built with plan_slots on a GPU), so the op
        # does not read the lengths back to plan it.
        plan = self.decode.decode_plan if self.decode is not None else None
        return {"plan": plan} if plan is not None else {}

    def _max_q(self) -> dict[str, int]:
        # The public ops take it (grid sizing without reading qo_indptr); the reference does not.
        return {"max_q_len": self.max_q} if self.ops.__name__ == "radixkv.ops" else {}
