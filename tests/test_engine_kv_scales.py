"""FP8 KV-cache scales from a checkpoint (``checkpoint.kv_scales``), on the CPU through the
reference ops: vLLM / llm-compressor names (``model.layers.{i}.self_attn.k_scale`` / ``v_scale``,
``kv_scale`` for both; scalar, ``[1]`` or ``[H_kv]``) reach the engine's FP8 pool and the ops it
calls; a checkpoint without them keeps 1.0; bad ones are a ``CheckpointError`` naming the tensor.
The checkpoints are written here: radixkv's own weights (``to_hf_state_dict`` / ``hf_config``)
plus the scale tensors, one safetensors file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

import radixkv as rk
from radixkv.engine import Engine, EngineConfig, ModelConfig, TinyLlama
from radixkv.engine.checkpoint import CheckpointError, hf_config, load_model, to_hf_state_dict
from radixkv.engine.kv import KVPool
from radixkv.engine.parallel_model import TPLlama
from radixkv.engine.request import Request, SamplingParams

safetensors_torch = pytest.importorskip("safetensors.torch")

CFG = ModelConfig(vocab_size=64, hidden_size=64, num_layers=2, num_q_heads=4, num_kv_heads=2,
                  head_dim=32, intermediate_size=96, max_seq_len=256)
ATTN = "model.layers.{}.self_attn."


@pytest.fixture(scope="module")
def tiny() -> TinyLlama:
    return TinyLlama(CFG)


def _write(path: Path, model: TinyLlama, extra: dict[str, torch.Tensor]) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(hf_config(model)))
    tensors = {k: v.contiguous() for k, v in to_hf_state_dict(model).items()}
    safetensors_torch.save_file({**tensors, **extra}, str(path / "model.safetensors"))
    return path


def _engine(model: object, kv_dtype: str = "fp8") -> Engine:
    return Engine(model, EngineConfig(pool_tokens=128, page_size=16, kv_dtype=kv_dtype))


def _serve(engine: Engine, n: int = 12) -> None:
    prompt = [(7 * i + 3) % CFG.vocab_size for i in range(n)]
    engine.run([Request("r0", np.array(prompt, dtype=np.int32), SamplingParams(max_new_tokens=4))])


def _scales(pool: KVPool, layer: int) -> tuple[list[float], list[float]]:
    return pool.k_scale[layer].reshape(-1).tolist(), pool.v_scale[layer].reshape(-1).tolist()


def test_checkpoint_scales_reach_the_fp8_pool(tmp_path: Path, tiny: TinyLlama) -> None:
    ckpt = _write(tmp_path / "c", tiny, {
        ATTN.format(0) + "k_scale": torch.tensor(0.25),                       # scalar
        ATTN.format(0) + "v_scale": torch.tensor([0.5], dtype=torch.bfloat16),  # [1]
        ATTN.format(1) + "kv_scale": torch.tensor([0.125, 2.0]),              # [H_kv], both
    })
    model = load_model(ckpt)
    assert model.kv_scales is not None and len(model.kv_scales) == 2
    e = _engine(model)
    assert e.pool.scale_source == "checkpoint"
    assert e.pool.k_scale[0].shape == () and e.pool.v_scale[0].shape == ()
    assert _scales(e.pool, 0) == ([0.25], [0.5])
    assert _scales(e.pool, 1) == ([0.125, 2.0], [0.125, 2.0])
    # The ops get these tensors: the pool's per-layer keyword arguments are them.
    for layer in range(2):
        sc = e.pool.scales(layer)
        assert sc["k_scale"] is e.pool.k_scale[layer] and sc["v_scale"] is e.pool.v_scale[layer]
    # A 16-bit pool has no scales whatever the checkpoint holds.
    assert _engine(model, "auto").pool.scales(0) == {}


def test_scales_change_what_the_pool_stores(tmp_path: Path, tiny: TinyLlama) -> None:
    """A tiny scale saturates the stored values (|value / scale| > 448 clips to e4m3's 448);
    1.0 (no scales in the checkpoint) stores them unclipped: the scales reach store_kv."""
    tiny_scale = {ATTN.format(i) + s: torch.tensor(1e-4) for i in range(2) for s in ("k_scale", "v_scale")}
    plain = _engine(load_model(_write(tmp_path / "plain", tiny, {})))
    scaled = _engine(load_model(_write(tmp_path / "scaled", tiny, tiny_scale)))
    assert plain.pool.scale_source == "1.0" and _scales(plain.pool, 0) == ([1.0], [1.0])
    for e in (plain, scaled):
        _serve(e)
    for layer in range(2):
        assert float(plain.pool.k[layer].float().abs().max()) < 100.0
        assert float(scaled.pool.k[layer].float().abs().max()) == 448.0
        assert float(scaled.pool.v[layer].float().abs().max()) == 448.0


def test_engine_without_scales_keeps_one(tiny: TinyLlama) -> None:
    e = _engine(tiny)
    assert tiny.kv_scales is None and e.pool.scale_source == "1.0"
    assert all(_scales(e.pool, i) == ([1.0], [1.0]) for i in range(2))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -0.5])
@pytest.mark.parametrize("name", ["k_scale", "v_scale", "kv_scale"])
def test_bad_scale_value_is_a_checkpoint_error(tmp_path: Path, tiny: TinyLlama, name: str,
                                               value: float) -> None:
    t = ATTN.format(1) + name
    ckpt = _write(tmp_path / "c", tiny, {t: torch.tensor([1.0, value])})
    with pytest.raises(CheckpointError, match="finite and > 0") as err:
        load_model(ckpt)
    assert err.value.tensor == t and isinstance(err.value, rk.InvalidArgument)


@pytest.mark.parametrize("extra,match", [
    ({ATTN.format(0) + "k_scale": torch.ones(3)}, r"scalar or \[2\]"),
    ({ATTN.format(0) + "v_scale": torch.ones(2, 1)}, r"scalar or \[2\]"),
    ({ATTN.format(0) + "k_scale": torch.ones((), dtype=torch.int32)}, "not supported"),
    ({ATTN.format(5) + "k_scale": torch.ones(())}, "unexpected tensor"),
    ({ATTN.format(0) + "kv_scale": torch.ones(()), ATTN.format(0) + "k_scale": torch.ones(())},
     "beside"),
])
def test_bad_scale_tensor_is_a_checkpoint_error(tmp_path: Path, tiny: TinyLlama,
                                                extra: dict[str, torch.Tensor], match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        load_model(_write(tmp_path / "c", tiny, extra))


def test_missing_layer_scale_is_one(tmp_path: Path, tiny: TinyLlama) -> None:
    model = load_model(_write(tmp_path / "c", tiny, {ATTN.format(1) + "k_scale": torch.tensor(3.0)}))
    e = _engine(model)
    assert _scales(e.pool, 0) == ([1.0], [1.0]) and _scales(e.pool, 1) == ([3.0], [1.0])


@pytest.mark.parametrize("scales,match", [
    ([(torch.tensor(1.0), torch.tensor(1.0))], "the model has 2"),
    ([(torch.tensor(1.0), torch.tensor(1.0)), (torch.ones(3), torch.tensor(1.0))], r"shape \[\] or \[2\]"),
    ([(torch.tensor(1.0), torch.tensor(float("nan"))), (torch.tensor(1.0), torch.tensor(1.0))],
     "finite and > 0"),
])
def test_pool_rejects_bad_scales(scales: list, match: str) -> None:
    with pytest.raises(rk.InvalidArgument, match=match):
        KVPool(CFG, 4, 16, torch.device("cpu"), torch.float8_e4m3fn, scales)


def test_tensor_parallel_shard_takes_its_heads_scales(tiny: TinyLlama) -> None:
    full = TinyLlama(CFG)
    full.kv_scales = [(torch.tensor([0.5, 0.25]), torch.tensor(2.0)),
                      (torch.tensor([1.5, 3.0]), torch.tensor([4.0, 8.0]))]
    shards: list[Optional[list]] = [TPLlama.from_model(full, r, 2).kv_scales for r in range(2)]
    assert shards[1] is not None and [s.tolist() for s in shards[1][1]] == [[3.0], [8.0]]
    assert shards[0] is not None and [s.tolist() for s in shards[0][0]] == [[0.5], 2.0]
    pool = KVPool(TPLlama.from_model(full, 1, 2).config, 4, 16, torch.device("cpu"),
                  torch.float8_e4m3fn, shards[1])
    assert _scales(pool, 0) == ([0.25], [2.0])
