"""The KV pools (one K and one V tensor per layer, bshd ``[num_pages, page_size, H_kv, D]``) and the
per-step attention that writes into them and reads from them through ``radixkv.ops``."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from radixkv.engine.model import ModelConfig


def select_ops(device: torch.device) -> ModuleType:
    """The kernels on a GPU; the pure-torch reference ops on the CPU."""
    if device.type == "cpu":
        from radixkv.ops import reference

        return reference
    import radixkv.ops

    return radixkv.ops


class KVPool:
    def __init__(
        self,
        config: ModelConfig,
        num_pages: int,
        page_size: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
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

    def copy_blocks(self, ops: ModuleType, pairs: torch.Tensor) -> None:
        for k, v in zip(self.k, self.v):
            ops.copy_blocks(k, v, pairs)


@dataclass
class Segment:
    """A run of rows of the step's token batch that share a pool and an attention kind."""

    pool: KVPool
    kind: str  # "extend" or "decode"
    start: int
    end: int
    write_slots: torch.Tensor  # int32 [end - start]
    qo_indptr: torch.Tensor | None  # int32 [B + 1]; extend only
    kv_indptr: torch.Tensor  # int32 [B + 1]
    kv_indices: torch.Tensor  # int32: slots (page_size 1) or pages
    kv_lens: torch.Tensor  # int32 [B]


class StepAttention:
    """``attend(layer, q, k, v)`` for ``TinyLlama.forward``: store this step's K/V, then attend."""

    def __init__(self, segments: list[Segment], ops: ModuleType) -> None:
        self.segments = segments
        self.ops = ops

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(q)
        for s in self.segments:
            kc, vc = s.pool.k[layer], s.pool.v[layer]
            self.ops.store_kv(kc, vc, k[s.start : s.end], v[s.start : s.end], s.write_slots)
            if s.kind == "extend":
                out[s.start : s.end] = self.ops.extend_attention(
                    q[s.start : s.end], kc, vc, s.qo_indptr, s.kv_indptr, s.kv_indices, s.kv_lens
                )
            else:
                out[s.start : s.end] = self.ops.paged_decode(
                    q[s.start : s.end], kc, vc, s.kv_indptr, s.kv_indices, s.kv_lens
                )
        return out
