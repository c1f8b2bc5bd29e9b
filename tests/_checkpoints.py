"""Small random Hugging Face checkpoints written by transformers itself, for the model tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)

# name -> (transformers config class name, model class name, config overrides)
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Llama 3.1-style: untied, GQA, theta 5e5 and llama3 RoPE scaling whose band falls inside
    # this head_dim's wavelengths (original context 64: low 64, high 16).
    "llama3_scaled": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Llama 2-style with tied embeddings and an explicit head_dim != hidden / heads.
    "llama_tied_headdim": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, rms_norm_eps=1e-5)),
    # Qwen2.5-style: q/k/v bias, tied (small Qwen2.5) and untied (7B).
    "qwen2_tied": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True,
                                                           rope_theta=1000000.0)),
    "qwen2_untied": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    # Mistral with a sliding window (served up to the window, where it changes nothing).
    "mistral_window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=512)),
}


def build_hf(case: str, seed: int = 0) -> Any:
    """A transformers model of ``case``, random weights scaled for clear greedy margins."""
    import transformers

    cfg_name, model_name, extra = CASES[case]
    config = getattr(transformers, cfg_name)(**COMMON, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.2)
            else:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)  # [out, in]: N(0, 1/fan_in)
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        if not config.tie_word_embeddings:
            model.lm_head.weight.normal_(0.0, 4.0 / config.hidden_size ** 0.5)
    return model


def write_checkpoint(case: str, path: Path, seed: int = 0, **save_kw: Any) -> Any:
    """Save ``case`` with ``save_pretrained`` (safetensors) into ``path``; return the model."""
    model = build_hf(case, seed)
    model.save_pretrained(str(path), **save_kw)
    return model
