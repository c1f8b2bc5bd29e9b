"""Named model shapes for random-weight models (``--model-shape``, ``checkpoint.model_from_shape``).

Each is the published architecture of a real checkpoint (its config.json numbers), so a benchmark
on random weights does the same arithmetic and moves the same bytes as the real model. "tiny" is
the demo's default model, small enough for an exact CPU run in seconds.
"""

from __future__ import annotations

import radixkv as rk
from radixkv.engine.model import ModelConfig, RopeScaling

_LLAMA31_ROPE = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=8192)
_LLAMA32_ROPE = RopeScaling("llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=8192)

_SHAPES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(),
    # Llama-3-8B: GQA 32q/8kv, 128k vocabulary, theta 5e5, no RoPE scaling, 8k context.
    "llama3-8b": ModelConfig(
        vocab_size=128256, hidden_size=4096, num_layers=32, num_q_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=14336, max_seq_len=8192, rope_theta=500000.0,
        rms_eps=1e-5, architecture="llama"),
    # Llama-3.1-8B: the same weights' shape with llama3 RoPE scaling (context capped at 32k here).
    "llama3.1-8b": ModelConfig(
        vocab_size=128256, hidden_size=4096, num_layers=32, num_q_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=14336, max_seq_len=32768, rope_theta=500000.0,
        rms_eps=1e-5, architecture="llama", rope_scaling=_LLAMA31_ROPE),
    # Llama-3.2-1B: tied embeddings, head_dim 64, llama3 RoPE scaling.
    "llama3.2-1b": ModelConfig(
        vocab_size=128256, hidden_size=2048, num_layers=16, num_q_heads=32, num_kv_heads=8,
        head_dim=64, intermediate_size=8192, max_seq_len=32768, rope_theta=500000.0,
        rms_eps=1e-5, architecture="llama", tie_embeddings=True, rope_scaling=_LLAMA32_ROPE),
    # Qwen2.5-7B: q/k/v bias, 28q/4kv heads, theta 1e6.
    "qwen2.5-7b": ModelConfig(
        vocab_size=152064, hidden_size=3584, num_layers=28, num_q_heads=28, num_kv_heads=4,
        head_dim=128, intermediate_size=18944, max_seq_len=32768, rope_theta=1000000.0,
        rms_eps=1e-6, architecture="qwen2", qkv_bias=True),
    # Qwen2.5-0.5B: tied embeddings, q/k/v bias, 14q/2kv heads of 64.
    "qwen2.5-0.5b": ModelConfig(
        vocab_size=151936, hidden_size=896, num_layers=24, num_q_heads=14, num_kv_heads=2,
        head_dim=64, intermediate_size=4864, max_seq_len=32768, rope_theta=1000000.0,
        rms_eps=1e-6, architecture="qwen2", qkv_bias=True, tie_embeddings=True),
    # Mistral-7B-v0.3: 32k vocabulary, no sliding window.
    "mistral-7b": ModelConfig(
        vocab_size=32768, hidden_size=4096, num_layers=32, num_q_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=14336, max_seq_len=32768, rope_theta=1000000.0,
        rms_eps=1e-5, architecture="mistral"),
}

SHAPES: tuple[str, ...] = tuple(_SHAPES)


def shape_config(name: str) -> ModelConfig:
    """The ``ModelConfig`` of a named shape; ``ValueError`` names the known ones otherwise."""
    try:
        return _SHAPES[name]
    except KeyError:
        raise rk.InvalidArgument(
            f"unknown model shape {name!r} (known: {', '.join(SHAPES)})") from None
