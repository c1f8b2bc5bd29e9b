"""A Llama-family decoder (Llama 2/3, Qwen2/2.5, Mistral): RMSNorm, RoPE, GQA attention, SwiGLU.

It computes what ``transformers`` computes for these architectures, op for op: RMSNorm in float32
and cast back before the weight multiply, rotate-half RoPE with float32 cos/sin tables cast to the
activation dtype, projections as ``F.linear`` on ``[out, in]`` weights. Q/K/V are one fused matmul
and gate/up another (their rows are the checkpoint's rows, concatenated).

The model does not know about KV caches: ``forward`` takes an ``attend(layer, q, k, v)`` callback
that the engine wires to ``radixkv.ops`` (paged KV), and ``forward_dense`` recomputes a whole
sequence with plain causal attention, independent of radixkv, as the reference the engine is
verified against. Building models (random shapes, Hugging Face checkpoints) is ``checkpoint.py``'s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

# attend(layer, q [N, H_q, D], k [N, H_kv, D], v [N, H_kv, D]) -> [N, H_q, D]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

ARCHITECTURES = ("llama", "qwen2", "mistral")  # Hugging Face model_type values
ROPE_TYPES = ("default", "llama3", "linear")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling, as the config's ``rope_scaling`` / ``rope_parameters`` give it.

    ``llama3``: Llama 3.1's band-wise scaling (uses every field); ``linear``: every frequency
    divided by ``factor``.
    """

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES[1:]:
            raise ValueError(f"unsupported RoPE scaling type {self.rope_type!r} "
                             f"(supported: {', '.join(ROPE_TYPES)})")
        if not self.factor > 0:
            raise ValueError(f"RoPE scaling factor must be > 0, got {self.factor}")
        if self.rope_type == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError("llama3 RoPE scaling needs high_freq_factor > low_freq_factor > 0, "
                             f"got {self.high_freq_factor} and {self.low_freq_factor}")


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
    architecture: str = "llama"  # Hugging Face model_type
    tie_embeddings: bool = False  # lm_head is the embedding matrix
    qkv_bias: bool = False  # Qwen2, or Llama's attention_bias
    o_bias: bool = False  # Llama's attention_bias
    mlp_bias: bool = False  # Llama's mlp_bias
    rope_scaling: RopeScaling | None = None
    eos_token_ids: tuple[int, ...] = ()  # from a checkpoint's config; empty for random shapes

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_q_heads", "num_kv_heads",
                     "head_dim", "intermediate_size", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_q_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_q_heads ({self.num_q_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"unsupported architecture {self.architecture!r} "
                             f"(supported: {', '.join(ARCHITECTURES)})")
        if not self.rope_theta > 0 or not self.rms_eps > 0:
            raise ValueError(f"rope_theta and rms_eps must be > 0, got {self.rope_theta}, "
                             f"{self.rms_eps}")

    @property
    def q_dim(self) -> int:
        return self.num_q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """K and V of one token across all layers."""
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem

    def num_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        per_layer = (h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h + 3 * h * i + 2 * h
                     + (self.q_dim + 2 * self.kv_dim) * self.qkv_bias + h * self.o_bias
                     + (2 * i + h) * self.mlp_bias)
        head = 0 if self.tie_embeddings else self.vocab_size * h
        return self.vocab_size * h + head + h + self.num_layers * per_layer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LayerWeights:
    """One decoder layer, Hugging Face ``[out, in]`` layout; fused rows are q | k | v, gate | up."""

    attn_norm: torch.Tensor  # [H]
    w_qkv: torch.Tensor  # [q_dim + 2 kv_dim, H]
    b_qkv: torch.Tensor | None  # [q_dim + 2 kv_dim]
    w_o: torch.Tensor  # [H, q_dim]
    b_o: torch.Tensor | None  # [H]
    mlp_norm: torch.Tensor  # [H]
    w_gate_up: torch.Tensor  # [2 I, H]
    b_gate_up: torch.Tensor | None  # [2 I]
    w_down: torch.Tensor  # [H, I]
    b_down: torch.Tensor | None  # [H]


@dataclass
class Weights:
    embed: torch.Tensor  # [V, H]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [H]
    lm_head: torch.Tensor  # [V, H]; the same tensor as ``embed`` when tied


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # As transformers' LlamaRMSNorm: normalise in float32, cast back, scale in the weight dtype.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """float32 [D/2] inverse frequencies, computed on the CPU in the order transformers uses."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = config.rope_scaling
    if s is None:
        return inv
    if s.rope_type == "linear":
        return inv / s.factor
    # llama3: long wavelengths are divided by `factor`, short ones kept, the band between blended.
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaModel:
    """A decoder over given weights. ``forward`` does no host synchronisation (no ``.item()``, no
    data-dependent branch), so a caller can capture it in a CUDA graph; callers validate tokens
    (``< vocab_size``) and positions (``< max_seq_len``) before calling it."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.config = config
        self.weights = weights
        self.device = weights.embed.device
        self.dtype = weights.embed.dtype
        # FP8 KV-cache scales per layer, (k_scale, v_scale) float32 CPU tensors of shape [] or
        # [H_kv], when a checkpoint stores them (checkpoint.kv_scales); None: FP8 pools use 1.0.
        self.kv_scales: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        inv_freq = rope_inv_freq(config).to(self.device)
        # float32 like transformers' rotary embedding: positions x inv_freq, doubled, cos / sin.
        angles = torch.arange(config.max_seq_len, device=self.device).float()[:, None] * inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        self._cos = angles.cos()
        self._sin = angles.sin()

    # Kept for callers of the old demo model: the layers and the embedding.
    @property
    def layers(self) -> list[LayerWeights]:
        return self.weights.layers

    @property
    def embed(self) -> torch.Tensor:
        return self.weights.embed

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attend: AttendFn,
        logits_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``tokens`` int64 [N] at ``positions`` int64 [N]; return float32 logits
        [M, vocab] of ``logits_rows`` int64 [M] (all N rows if None)."""
        c = self.config
        w = self.weights
        n = tokens.shape[0]
        hq, hkv, d = c.num_q_heads, c.num_kv_heads, c.head_dim
        qk_dim = (hq + hkv) * d
        inter = c.intermediate_size
        cos = self._cos[positions].to(self.dtype).unsqueeze(1)  # [N, 1, D], shared by q and k
        sin = self._sin[positions].to(self.dtype).unsqueeze(1)
        h = F.embedding(tokens, w.embed)
        for index, layer in enumerate(w.layers):
            x = rms_norm(h, layer.attn_norm, c.rms_eps)
            qkv = F.linear(x, layer.w_qkv, layer.b_qkv)
            qk = qkv[:, :qk_dim].view(n, hq + hkv, d)
            qk = qk * cos + _rotate_half(qk) * sin
            q = qk[:, :hq].contiguous()
            k = qk[:, hq:].contiguous()
            v = qkv[:, qk_dim:].reshape(n, hkv, d)
            o = attend(index, q, k, v)
            h = h + self._row_linear(o.reshape(n, hq * d), layer.w_o, layer.b_o)
            x = rms_norm(h, layer.mlp_norm, c.rms_eps)
            gate_up = F.linear(x, layer.w_gate_up, layer.b_gate_up)
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            h = h + self._row_linear(act, layer.w_down, layer.b_down)
        if logits_rows is not None:
            h = h[logits_rows]
        return F.linear(rms_norm(h, w.final_norm, c.rms_eps), w.lm_head).float()

    def _row_linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """The output and down projections. Tensor parallelism (``parallel_model``) overrides it:
        each rank holds some of the input columns and the partial products are summed."""
        return F.linear(x, w, b)

    def forward_dense(self, tokens: torch.Tensor) -> torch.Tensor:
        """float32 logits [L, V] of one whole sequence ``tokens`` int64 [L], recomputed with dense
        causal attention: no cache, no paging, no radixkv code."""
        c = self.config
        length = tokens.shape[0]
        if length > c.max_seq_len:
            raise ValueError(f"sequence of {length} tokens > max_seq_len {c.max_seq_len}")
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


class TinyLlama(LlamaModel):
    """The demo's model: weights drawn from a seeded generator on the CPU (in float32, then cast),
    so every device and dtype gets the same model for a seed. Fine for small shapes; large ones are
    drawn on the device by ``checkpoint.model_from_shape``."""

    def __init__(
        self,
        config: ModelConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        dev = torch.device(device)
        c = config
        gen = torch.Generator().manual_seed(c.seed)

        def w(fan_in: int, fan_out: int, scale: float = 1.0) -> torch.Tensor:
            # 1/sqrt(fan_in) keeps activations O(1), so greedy choices have clear margins.
            # Drawn [in, out] (the original demo's order of draws), stored [out, in].
            return torch.randn(fan_in, fan_out, generator=gen).mul_(scale / math.sqrt(fan_in)).t()

        def norm(n: int) -> torch.Tensor:
            return (1.0 + 0.1 * torch.randn(n, generator=gen)).to(dev, dtype)

        def bias(n: int, on: bool) -> torch.Tensor | None:
            return (0.1 * torch.randn(n, generator=gen)).to(dev, dtype) if on else None

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.contiguous().to(dev, dtype)

        embed = put(torch.randn(c.vocab_size, c.hidden_size, generator=gen))
        layers = []
        for _ in range(c.num_layers):
            attn_norm = norm(c.hidden_size)
            wq = w(c.hidden_size, c.q_dim)
            wk, wv = w(c.hidden_size, c.kv_dim), w(c.hidden_size, c.kv_dim)
            wo = w(c.q_dim, c.hidden_size, 0.5)
            mlp_norm = norm(c.hidden_size)
            wg, wu = w(c.hidden_size, c.intermediate_size), w(c.hidden_size, c.intermediate_size)
            wd = w(c.intermediate_size, c.hidden_size, 0.5)
            layers.append(LayerWeights(
                attn_norm=attn_norm, w_qkv=put(torch.cat([wq, wk, wv])),
                b_qkv=bias(c.q_dim + 2 * c.kv_dim, c.qkv_bias), w_o=put(wo),
                b_o=bias(c.hidden_size, c.o_bias), mlp_norm=mlp_norm,
                w_gate_up=put(torch.cat([wg, wu])),
                b_gate_up=bias(2 * c.intermediate_size, c.mlp_bias),
                w_down=put(wd), b_down=bias(c.hidden_size, c.mlp_bias),
            ))
        final_norm = norm(c.hidden_size)
        lm_head = embed if c.tie_embeddings else put(w(c.hidden_size, c.vocab_size, 4.0))
        super().__init__(config, Weights(embed, layers, final_norm, lm_head))
