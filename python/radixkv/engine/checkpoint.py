"""Building models: from a Hugging Face checkpoint folder, or seeded random weights of a named
shape; and the way back to transformers (``to_hf_state_dict``, ``hf_config``) so the same weights
can run there.

A checkpoint is a folder with ``config.json`` and ``*.safetensors`` (one file, or shards listed by
``model.safetensors.index.json``). ``inspect_checkpoint`` reads only the config and the safetensors
headers and checks everything (architecture, features, every tensor's presence, dtype and shape,
file sizes) before ``load_model`` takes any device memory; a problem is one ``CheckpointError``
naming the file and the tensor.
"""

from __future__ import annotations

import json
import math
import re
import os
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

import radixkv as rk
from radixkv.engine.model import (
    ARCHITECTURES,
    ROPE_TYPES,
    LayerWeights,
    LlamaModel,
    ModelConfig,
    RopeScaling,
    TinyLlama,
    Weights,
)
from radixkv.engine.shapes import SHAPES, shape_config

__all__ = [
    "SHAPES",
    "CheckpointError",
    "CheckpointInfo",
    "hf_config",
    "inspect_checkpoint",
    "kv_scales",
    "load_model",
    "model_from_shape",
    "random_weights",
    "to_hf_state_dict",
]

_HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "mistral": "MistralForCausalLM"}
_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_INDEX = "model.safetensors.index.json"


class CheckpointError(rk.InvalidArgument):
    """A checkpoint folder that cannot be served: missing files, an unsupported architecture or
    feature, or tensors that disagree with the config. ``file`` and ``tensor`` name the culprit."""

    def __init__(self, message: str, file: str | os.PathLike[str] | None = None,
                 tensor: str | None = None) -> None:
        where = []
        if file is not None:
            where.append(f"file {os.fspath(file)}")
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        super().__init__(f"{message}" + (f" ({', '.join(where)})" if where else ""))
        self.file = None if file is None else os.fspath(file)
        self.tensor = tensor


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # safetensors dtype code: F32, BF16, ...
    shape: tuple[int, ...]


@dataclass
class CheckpointInfo:
    """What ``inspect_checkpoint`` found: the model config and where each tensor lives."""

    path: Path
    config: ModelConfig
    dtype: torch.dtype | None  # the config's declared dtype, if any
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


# -- config.json ---------------------------------------------------------------------------------


def _get(cfg: dict[str, Any], key: str, file: Path, kind: type | tuple[type, ...] = int,
         default: Any = None) -> Any:
    value = cfg.get(key, default)
    if value is None:
        raise CheckpointError(f"config.json has no {key!r}", file)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise CheckpointError(f"config.json: {key!r} is {value!r}, expected a number", file)
    return value


def _rope(cfg: dict[str, Any], file: Path) -> tuple[float, RopeScaling | None]:
    # transformers 5 writes `rope_parameters` (theta inside); older configs `rope_theta` and
    # `rope_scaling` (which, as transformers does, takes precedence when both are present).
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
        raise CheckpointError("per-layer RoPE parameters are not supported", file)
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise CheckpointError(f"config.json: rope_theta is {theta!r}, expected a number > 0", file)
    partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise CheckpointError(f"partial_rotary_factor {partial} is not supported", file)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind not in ROPE_TYPES:
        raise CheckpointError(f"unsupported RoPE scaling type {kind!r} (supported: "
                              f"{', '.join(ROPE_TYPES)})", file)
    try:
        if kind == "linear":
            return float(theta), RopeScaling("linear", float(params["factor"]))
        original = params.get("original_max_position_embeddings",
                              cfg.get("max_position_embeddings"))
        if original is None:
            raise KeyError("original_max_position_embeddings")
        return float(theta), RopeScaling(
            "llama3", float(params["factor"]), float(params["low_freq_factor"]),
            float(params["high_freq_factor"]), int(original))
    except KeyError as e:
        raise CheckpointError(f"{kind} RoPE scaling without {e.args[0]!r}", file) from None
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"bad {kind} RoPE scaling: {e}", file) from None


def _eos_ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return ()


def config_from_hf(cfg: dict[str, Any], file: Path, max_seq_len: int | None = None) -> ModelConfig:
    """Our ``ModelConfig`` from a Hugging Face ``config.json`` dict; unsupported ones raise."""
    archs = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    supported = set(_HF_CLASSES.values())
    if not isinstance(archs, list) or any(a not in supported for a in archs):
        raise CheckpointError(f"unsupported architecture {archs!r} (supported: "
                              f"{', '.join(sorted(supported))})", file)
    if model_type not in ARCHITECTURES:
        raise CheckpointError(f"unsupported model_type {model_type!r} (supported: "
                              f"{', '.join(ARCHITECTURES)})", file)
    if archs and archs[0] != _HF_CLASSES[model_type]:
        raise CheckpointError(f"architecture {archs[0]} does not match model_type "
                              f"{model_type!r}", file)
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"hidden_act {act!r} is not supported (only 'silu')", file)
    hidden = _get(cfg, "hidden_size", file)
    heads = _get(cfg, "num_attention_heads", file)
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    theta, scaling = _rope(cfg, file)
    max_pos = _get(cfg, "max_position_embeddings", file, default=2048)
    # A sliding window changes nothing for sequences no longer than the window: cap to it.
    window = cfg.get("sliding_window")
    if model_type == "qwen2" and not cfg.get("use_sliding_window", False):
        window = None
    if model_type == "llama":
        window = None
    limit = min(max_pos, window) if isinstance(window, int) and window > 0 else max_pos
    if max_seq_len is not None:
        if max_seq_len > limit:
            raise CheckpointError(f"max_seq_len {max_seq_len} > the model's {limit}", file)
        limit = max_seq_len
    # Qwen2 always has q/k/v bias; Llama's attention_bias covers q/k/v/o; Mistral has none.
    llama_bias = model_type == "llama" and bool(cfg.get("attention_bias", False))
    qkv_bias = model_type == "qwen2" or llama_bias
    try:
        return ModelConfig(
            vocab_size=_get(cfg, "vocab_size", file), hidden_size=hidden,
            num_layers=_get(cfg, "num_hidden_layers", file), num_q_heads=heads,
            num_kv_heads=int(kv_heads), head_dim=int(head_dim),
            intermediate_size=_get(cfg, "intermediate_size", file), max_seq_len=int(limit),
            rope_theta=theta, rms_eps=float(_get(cfg, "rms_norm_eps", file, (int, float), 1e-6)),
            architecture=model_type, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias, o_bias=llama_bias,
            mlp_bias=model_type == "llama" and bool(cfg.get("mlp_bias", False)),
            rope_scaling=scaling, eos_token_ids=_eos_ids(cfg.get("eos_token_id")),
        )
    except ValueError as e:
        raise CheckpointError(f"config.json: {e}", file) from None


# -- tensor names and shapes -----------------------------------------------------------------------


def expected_tensors(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor names of this config and their shapes (``lm_head`` only if untied)."""
    h, i = c.hidden_size, c.intermediate_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, h)}
    for n in range(c.num_layers):
        p = f"model.layers.{n}."
        out[p + "input_layernorm.weight"] = (h,)
        for proj, rows in (("q", c.q_dim), ("k", c.kv_dim), ("v", c.kv_dim)):
            out[p + f"self_attn.{proj}_proj.weight"] = (rows, h)
            if c.qkv_bias:
                out[p + f"self_attn.{proj}_proj.bias"] = (rows,)
        out[p + "self_attn.o_proj.weight"] = (h, c.q_dim)
        if c.o_bias:
            out[p + "self_attn.o_proj.bias"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        for proj, shape in (("gate", (i, h)), ("up", (i, h)), ("down", (h, i))):
            out[p + f"mlp.{proj}_proj.weight"] = shape
            if c.mlp_bias:
                out[p + f"mlp.{proj}_proj.bias"] = (shape[0],)
    out["model.norm.weight"] = (h,)
    if not c.tie_embeddings:
        out["lm_head.weight"] = (c.vocab_size, h)
    return out


# FP8 KV-cache scales (vLLM / llm-compressor naming), optional per layer: stored value x scale =
# real value; ``kv_scale`` (older checkpoints) serves as both.
_KV_SCALE = re.compile(r"model\.layers\.(\d+)\.self_attn\.(k_scale|v_scale|kv_scale)")


def _kv_scale_layer(name: str, c: ModelConfig) -> int | None:
    """The layer of a KV-cache scale tensor name of this config, else None."""
    m = _KV_SCALE.fullmatch(name)
    return int(m.group(1)) if m is not None and int(m.group(1)) < c.num_layers else None


def _check_kv_scale(name: str, info: TensorInfo, c: ModelConfig) -> None:
    if info.dtype not in _DTYPES:
        raise CheckpointError(f"dtype {info.dtype} is not supported for a KV-cache scale (F32, "
                              "F16, BF16)", info.file, name)
    if info.shape not in ((), (1,), (c.num_kv_heads,)):
        raise CheckpointError(f"a KV-cache scale must be a scalar or [{c.num_kv_heads}] (one per "
                              f"KV head), got shape {list(info.shape)}", info.file, name)


def _ignored(name: str) -> bool:
    # Old checkpoints store the RoPE buffer; tied ones may still carry a copy of lm_head.
    return name.endswith("rotary_emb.inv_freq")


# -- safetensors headers ----------------------------------------------------------------------


def read_header(file: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors file's header (no tensor data read)."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise CheckpointError("not a safetensors file (shorter than its header)", file)
            (n,) = struct.unpack("<Q", raw)
            if n > min(size - 8, 100_000_000):
                raise CheckpointError("not a safetensors file (bad header length)", file)
            header = json.loads(f.read(n))
    except OSError as e:
        raise CheckpointError(f"cannot read: {e.strerror}", file) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError("not a safetensors file (header is not JSON)", file) from None
    if not isinstance(header, dict):
        raise CheckpointError("not a safetensors file (header is not a JSON object)", file)
    data = size - 8 - n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = meta["dtype"], tuple(meta["shape"]), meta["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError("malformed header entry", file, name) from None
        if end > data or begin > end:
            raise CheckpointError(f"data ends at byte {end} but the file holds {data} "
                                  "(truncated?)", file, name)
        out[name] = TensorInfo(file, str(dtype), shape)
    return out


def _weight_files(path: Path) -> list[Path]:
    index = path / _INDEX
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise CheckpointError("unreadable shard index (needs a 'weight_map')", index) from None
        for name in files:
            if not (path / name).is_file():
                raise CheckpointError(f"shard {name} listed by {_INDEX} is missing", path / name)
        return [path / name for name in files]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        other = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt*")]
        hint = f" (found {', '.join(other)}: only safetensors is read)" if other else ""
        raise CheckpointError(f"no *.safetensors weights{hint}", path)
    return files


def inspect_checkpoint(path: str | os.PathLike[str], max_seq_len: int | None = None
                       ) -> CheckpointInfo:
    """Validate a checkpoint folder from its config and safetensors headers alone."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError("checkpoint path is not a folder", root)
    cfg_file = root / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError("config.json is missing", cfg_file)
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"config.json is not readable JSON: {e}", cfg_file) from None
    if not isinstance(cfg, dict):
        raise CheckpointError("config.json is not a JSON object", cfg_file)
    config = config_from_hf(cfg, cfg_file, max_seq_len)
    declared = _DTYPE_NAMES.get(str(cfg.get("dtype") or cfg.get("torch_dtype")))
    found: dict[str, TensorInfo] = {}
    for file in _weight_files(root):
        for name, info in read_header(file).items():
            if name in found:
                raise CheckpointError(f"tensor also stored in {found[name].file.name}", file, name)
            found[name] = info
    expected = expected_tensors(config)
    for name, shape in expected.items():
        got = found.get(name)
        if got is None:
            raise CheckpointError("tensor missing from the checkpoint", root, name)
        if got.dtype not in _DTYPES:
            raise CheckpointError(f"dtype {got.dtype} is not supported (F32, F16, BF16)",
                                  got.file, name)
        if got.shape != shape:
            raise CheckpointError(f"shape {list(got.shape)} disagrees with config.json, which "
                                  f"implies {list(shape)}", got.file, name)
    for name, info in found.items():
        if name in expected or _ignored(name):
            continue
        if _kv_scale_layer(name, config) is not None:
            _check_kv_scale(name, info, config)
            continue
        if name == "lm_head.weight" and config.tie_embeddings:
            continue  # transformers ties it to the embedding and ignores the stored copy
        raise CheckpointError("unexpected tensor (not part of this config's model)", info.file,
                              name)
    return CheckpointInfo(root, config, declared, found)


# -- building models ----------------------------------------------------------------------


def _empty_weights(c: ModelConfig, device: torch.device, dtype: torch.dtype,
                   fill: Callable[[str, torch.Tensor], None]) -> Weights:
    """Allocate fused weights and let ``fill(hf_name, view)`` write each checkpoint tensor."""

    def new(name: str, *shape: int) -> torch.Tensor:
        t = torch.empty(shape, device=device, dtype=dtype)
        fill(name, t)
        return t

    def fused(names: list[tuple[str, int]], *tail: int) -> torch.Tensor:
        t = torch.empty((sum(r for _, r in names), *tail), device=device, dtype=dtype)
        row = 0
        for name, rows in names:
            fill(name, t[row : row + rows])
            row += rows
        return t

    h, i = c.hidden_size, c.intermediate_size
    embed = new("model.embed_tokens.weight", c.vocab_size, h)
    layers = []
    for n in range(c.num_layers):
        p = f"model.layers.{n}."
        qkv = [(p + f"self_attn.{x}_proj", r) for x, r in (("q", c.q_dim), ("k", c.kv_dim),
                                                             ("v", c.kv_dim))]
        gu = [(p + "mlp.gate_proj", i), (p + "mlp.up_proj", i)]
        layers.append(LayerWeights(
            attn_norm=new(p + "input_layernorm.weight", h),
            w_qkv=fused([(k + ".weight", r) for k, r in qkv], h),
            b_qkv=fused([(k + ".bias", r) for k, r in qkv]) if c.qkv_bias else None,
            w_o=new(p + "self_attn.o_proj.weight", h, c.q_dim),
            b_o=new(p + "self_attn.o_proj.bias", h) if c.o_bias else None,
            mlp_norm=new(p + "post_attention_layernorm.weight", h),
            w_gate_up=fused([(k + ".weight", r) for k, r in gu], h),
            b_gate_up=fused([(k + ".bias", r) for k, r in gu]) if c.mlp_bias else None,
            w_down=new(p + "mlp.down_proj.weight", h, i),
            b_down=new(p + "mlp.down_proj.bias", h) if c.mlp_bias else None,
        ))
    final_norm = new("model.norm.weight", h)
    lm_head = embed if c.tie_embeddings else new("lm_head.weight", c.vocab_size, h)
    return Weights(embed, layers, final_norm, lm_head)


def load_model(path: str | os.PathLike[str], device: str | torch.device = "cpu",
               dtype: torch.dtype | None = None, max_seq_len: int | None = None) -> LlamaModel:
    """Load a Hugging Face checkpoint folder. ``dtype`` None: the config's dtype (float32 if it
    names none). Everything is validated from headers before any device memory is taken."""
    from safetensors import safe_open

    info = inspect_checkpoint(path, max_seq_len)
    dtype = dtype or info.dtype or torch.float32
    dev = torch.device(device)
    handles: dict[Path, Any] = {}
    try:
        def read(name: str) -> torch.Tensor:
            file = info.tensors[name].file
            if file not in handles:
                handles[file] = safe_open(str(file), framework="pt", device="cpu")
            t: torch.Tensor = handles[file].get_tensor(name)
            return t

        def fill(name: str, dst: torch.Tensor) -> None:
            dst.copy_(read(name))

        weights = _empty_weights(info.config, dev, dtype, fill)
        scales = kv_scales(info, read)
    finally:
        handles.clear()
    model = LlamaModel(info.config, weights)
    model.kv_scales = scales
    return model


def kv_scales(info: CheckpointInfo, read: Callable[[str], torch.Tensor]
              ) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The checkpoint's FP8 KV-cache scales, per layer ``(k_scale, v_scale)``: float32 CPU tensors
    of shape ``[]`` or ``[H_kv]`` (``read(name)`` gives a stored tensor). None when it stores none
    (FP8 pools then use 1.0); a layer without them gets 1.0 (vLLM's default). ``kv_scale`` serves
    as both. ``CheckpointError`` (naming the tensor) for a value that is not finite and > 0, or a
    layer that stores ``kv_scale`` beside ``k_scale`` / ``v_scale``."""
    c = info.config
    names: dict[int, dict[str, str]] = {}
    for name in info.tensors:
        layer = _kv_scale_layer(name, c)
        if layer is not None:
            names.setdefault(layer, {})[name.rsplit(".", 1)[1]] = name
    if not names:
        return None
    one = torch.ones((), dtype=torch.float32)
    out = []
    for layer in range(c.num_layers):
        have = names.get(layer, {})
        if "kv_scale" in have and ("k_scale" in have or "v_scale" in have):
            raise CheckpointError("layer stores kv_scale beside k_scale / v_scale (which one "
                                  "holds?)", info.tensors[have["kv_scale"]].file, have["kv_scale"])
        pair = []
        for which in ("k_scale", "v_scale"):
            found = have.get(which, have.get("kv_scale"))
            if found is None:
                pair.append(one.clone())
                continue
            name = found
            t = read(name).to(torch.float32).reshape(-1)
            t = t.reshape(()) if t.numel() == 1 else t  # [1]: per tensor
            bad = ~(torch.isfinite(t) & (t > 0))
            if bool(bad.any()):
                raise CheckpointError(f"KV-cache scale must be finite and > 0, got "
                                      f"{float(t.reshape(-1)[bad.reshape(-1)][0])}",
                                      info.tensors[name].file, name)
            pair.append(t.contiguous())
        out.append((pair[0], pair[1]))
    return out


def random_weights(config: ModelConfig, device: str | torch.device = "cpu",
                   dtype: torch.dtype = torch.float32, seed: int = 0) -> Weights:
    """Seeded random weights drawn directly on ``device`` in ``dtype`` (no host copy): an 8B
    model builds in about a second on a GPU. Scales as ``TinyLlama``'s: N(0, 1/fan_in)
    projections (0.5x for o/down, 4x for lm_head), N(0, 1) embeddings, norms near 1. A tied
    embedding is small (norm 0.25) and the final norm 16x larger instead: a large embedding stays
    in the residual stream, and its own logit (|e|^2 scale) would make the model repeat its input.
    """
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    scale = {"o_proj": 0.5, "down_proj": 0.5, "lm_head": 4.0}
    tied = config.tie_embeddings
    if tied:
        scale["embed_tokens"] = 0.25

    def fill(name: str, t: torch.Tensor) -> None:
        t.normal_(0.0, 1.0, generator=gen)
        if name.endswith("norm.weight"):
            t.mul_(0.1).add_(1.0)
            if tied and name == "model.norm.weight":
                t.mul_(16.0)
        elif name.endswith(".bias"):
            t.mul_(0.1)
        elif name != "model.embed_tokens.weight" or config.tie_embeddings:
            mult = next((v for k, v in scale.items() if k in name), 1.0)
            t.mul_(mult / math.sqrt(t.shape[-1]))

    return _empty_weights(config, dev, dtype, fill)


def model_from_shape(name: str, device: str | torch.device = "cpu",
                     dtype: torch.dtype = torch.float32, seed: int = 0,
                     **overrides: Any) -> LlamaModel:
    """A model of a named shape (``SHAPES``) with seeded random weights. ``overrides`` replace
    config fields (e.g. ``num_layers=2``). "tiny" keeps the demo's CPU-drawn weights
    (``TinyLlama``: the same model on every device); other shapes draw on ``device``."""
    config = replace(shape_config(name), seed=seed, **overrides)
    if name == "tiny":
        return TinyLlama(config, device, dtype)
    return LlamaModel(config, random_weights(config, device, dtype, seed))


# -- back to transformers -------------------------------------------------------------------------


def to_hf_state_dict(model: LlamaModel) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face names, as views (no copies) of its fused tensors.
    ``lm_head.weight`` is always present (the embedding itself when tied), as transformers'
    ``state_dict()`` has it."""
    c, w = model.config, model.weights
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": w.embed}

    def split(prefix: str, t: torch.Tensor | None, parts: list[tuple[str, int]],
              suffix: str) -> None:
        if t is None:
            return
        row = 0
        for name, rows in parts:
            out[f"{prefix}{name}.{suffix}"] = t[row : row + rows]
            row += rows

    for n, layer in enumerate(w.layers):
        p = f"model.layers.{n}."
        qkv = [("self_attn.q_proj", c.q_dim), ("self_attn.k_proj", c.kv_dim),
               ("self_attn.v_proj", c.kv_dim)]
        gu = [("mlp.gate_proj", c.intermediate_size), ("mlp.up_proj", c.intermediate_size)]
        out[p + "input_layernorm.weight"] = layer.attn_norm
        split(p, layer.w_qkv, qkv, "weight")
        split(p, layer.b_qkv, qkv, "bias")
        out[p + "self_attn.o_proj.weight"] = layer.w_o
        if layer.b_o is not None:
            out[p + "self_attn.o_proj.bias"] = layer.b_o
        out[p + "post_attention_layernorm.weight"] = layer.mlp_norm
        split(p, layer.w_gate_up, gu, "weight")
        split(p, layer.b_gate_up, gu, "bias")
        out[p + "mlp.down_proj.weight"] = layer.w_down
        if layer.b_down is not None:
            out[p + "mlp.down_proj.bias"] = layer.b_down
    out["model.norm.weight"] = w.final_norm
    out["lm_head.weight"] = w.lm_head
    return out


def hf_config(model: LlamaModel) -> dict[str, Any]:
    """A Hugging Face ``config.json`` dict for the model (``transformers.AutoConfig.for_model(
    **d)`` builds it; ``model_type`` and ``architectures`` say which class)."""
    c = model.config
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        s = c.rope_scaling
        rope.update(rope_type=s.rope_type, factor=s.factor)
        if s.rope_type == "llama3":
            rope.update(low_freq_factor=s.low_freq_factor, high_freq_factor=s.high_freq_factor,
                        original_max_position_embeddings=s.original_max_position_embeddings)
    d: dict[str, Any] = {
        "model_type": c.architecture,
        "architectures": [_HF_CLASSES[c.architecture]],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_q_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.rms_eps,
        "rope_parameters": rope,
        "tie_word_embeddings": c.tie_embeddings,
        "dtype": str(model.dtype).replace("torch.", ""),
        "bos_token_id": None,
        "eos_token_id": list(c.eos_token_ids) or None,
        "pad_token_id": None,
    }
    if c.architecture == "llama":
        if c.qkv_bias != c.o_bias:
            raise ValueError("Llama's attention_bias covers q/k/v and o alike")
        d.update(attention_bias=c.qkv_bias, mlp_bias=c.mlp_bias)
    elif (c.qkv_bias, c.o_bias, c.mlp_bias) != (c.architecture == "qwen2", False, False):
        raise ValueError(f"this bias layout has no {c.architecture} Hugging Face config")
    if c.architecture == "qwen2":
        d.update(use_sliding_window=False)
    if c.architecture == "mistral":
        d.update(sliding_window=None)
    return d


def hf_model(model: LlamaModel, attn_implementation: str = "sdpa") -> Any:
    """A transformers model holding a copy of ``model``'s weights, on its device and dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    d = hf_config(model)
    cfg = AutoConfig.for_model(d.pop("model_type"), **d)
    with torch.device(model.device):
        hf = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            cfg, dtype=model.dtype, attn_implementation=attn_implementation)
    state = to_hf_state_dict(model)
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"transformers model does not match: missing {missing}, "
                           f"unexpected {unexpected}")
    return hf.eval()
