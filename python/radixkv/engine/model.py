"""A small Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU) with seeded random weights.

The model does not know about KV caches: ``forward`` takes an ``attend(layer, q, k, v)`` callback
that the engine wires to ``radixkv.ops`` (paged KV), and ``forward_dense`` recomputes a whole
sequence with plain causal attention, independent of radixkv, as the reference the engine is
verified against.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

# attend(layer, q [N, H_q, D], k [N, H_kv, D], v [N, H_kv, D]) -> [N, H_q, D]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 4
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 344
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_q_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_q_heads ({self.num_q_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """K and V of one token across all layers."""
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in fp32 whatever the activation dtype, as Llama implementations do.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


class TinyLlama:
    """Weights are drawn from a seeded generator on the CPU, so every device gets the same model."""

    def __init__(
        self,
        config: ModelConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        c = config
        gen = torch.Generator().manual_seed(c.seed)

        def w(rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
            # 1/sqrt(fan_in) keeps activations O(1), so greedy choices have clear margins.
            t = torch.randn(rows, cols, generator=gen) * (scale / math.sqrt(rows))
            return t.to(self.device, dtype)

        def norm(n: int) -> torch.Tensor:
            return (1.0 + 0.1 * torch.randn(n, generator=gen)).to(self.device, dtype)

        q_dim = c.num_q_heads * c.head_dim
        kv_dim = c.num_kv_heads * c.head_dim
        self.embed = torch.randn(c.vocab_size, c.hidden_size, generator=gen).to(self.device, dtype)
        self.layers = [
            _Layer(
                attn_norm=norm(c.hidden_size),
                wq=w(c.hidden_size, q_dim),
                wk=w(c.hidden_size, kv_dim),
                wv=w(c.hidden_size, kv_dim),
                wo=w(q_dim, c.hidden_size, 0.5),
                mlp_norm=norm(c.hidden_size),
                w_gate=w(c.hidden_size, c.intermediate_size),
                w_up=w(c.hidden_size, c.intermediate_size),
                w_down=w(c.intermediate_size, c.hidden_size, 0.5),
            )
            for _ in range(c.num_layers)
        ]
        self.final_norm = norm(c.hidden_size)
        self.lm_head = w(c.hidden_size, c.vocab_size, 4.0)
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
        angles = torch.outer(torch.arange(c.max_seq_len).double(), inv_freq)
        self._cos = angles.cos().to(self.device, torch.float32)
        self._sin = angles.sin().to(self.device, torch.float32)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate-half RoPE on [N, H, D] at absolute positions [N]."""
        cos = self._cos[positions].unsqueeze(1)
        sin = self._sin[positions].unsqueeze(1)
        xf = x.float()
        half = xf.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return out.to(x.dtype)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attend: AttendFn,
        logits_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``tokens`` [N] at ``positions`` [N]; return fp32 logits of ``logits_rows`` (all if None)."""
        c = self.config
        n = tokens.shape[0]
        if n and int(positions.max()) >= c.max_seq_len:
            raise ValueError(f"position {int(positions.max())} >= max_seq_len {c.max_seq_len}")
        h = self.embed[tokens]
        for index, layer in enumerate(self.layers):
            x = _rms_norm(h, layer.attn_norm, c.rms_eps)
            q = self._rope((x @ layer.wq).view(n, c.num_q_heads, c.head_dim), positions)
            k = self._rope((x @ layer.wk).view(n, c.num_kv_heads, c.head_dim), positions)
            v = (x @ layer.wv).view(n, c.num_kv_heads, c.head_dim)
            o = attend(index, q.contiguous(), k.contiguous(), v.contiguous())
            h = h + o.reshape(n, -1) @ layer.wo
            x = _rms_norm(h, layer.mlp_norm, c.rms_eps)
            h = h + (torch.nn.functional.silu(x @ layer.w_gate) * (x @ layer.w_up)) @ layer.w_down
        if logits_rows is not None:
            h = h[logits_rows]
        return (_rms_norm(h, self.final_norm, c.rms_eps) @ self.lm_head).float()

    def forward_dense(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [L, V] of one whole sequence, recomputed with dense causal attention.

        The reference path: no cache, no paging, no radixkv code.
        """
        c = self.config
        length = tokens.shape[0]
        group = c.num_q_heads // c.num_kv_heads
        mask = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()

        def dense(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kf = k.float().repeat_interleave(group, dim=1)  # query head h reads KV head h // group
            vf = v.float().repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q.float(), kf) / math.sqrt(c.head_dim)
            scores = scores.masked_fill(~mask, float("-inf"))
            out = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), vf)
            return out.to(q.dtype)

        positions = torch.arange(length, device=self.device)
        return self.forward(tokens.to(self.device), positions, dense)
