"""Real model architectures: checkpoints written by transformers itself load into radixkv's model,
which computes transformers' logits (float32, 1e-4 relative) and, served by the engine, generates
transformers' greedy tokens exactly. Bad checkpoints get one typed error naming file and tensor,
before any weight memory is allocated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import radixkv as rk
from radixkv.engine import Engine, EngineConfig, Request, SamplingParams, TinyLlama
from radixkv.engine import checkpoint as ck
from radixkv.engine.checkpoint import (
    SHAPES,
    CheckpointError,
    hf_config,
    inspect_checkpoint,
    load_model,
    model_from_shape,
    to_hf_state_dict,
)
from radixkv.engine.model import LlamaModel, ModelConfig, rope_inv_freq
from radixkv.engine.shapes import shape_config
from radixkv.engine.verify import TransformersReference, verify

transformers = pytest.importorskip("transformers")

from _checkpoints import CASES, write_checkpoint  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    root = tmp_path_factory.mktemp("ckpt")
    return {case: (root / case, write_checkpoint(case, root / case)) for case in CASES}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(checkpoints: dict[str, tuple[Path, Any]], case: str) -> None:
    path, hf = checkpoints[case]
    model = load_model(path)
    tokens = torch.from_numpy(np.random.default_rng(1).integers(0, 300, size=200))
    with torch.no_grad():
        ref = hf(tokens[None]).logits[0].float()
    ours = model.forward_dense(tokens)
    assert ours.shape == ref.shape and ours.dtype == torch.float32
    assert _rel(ours, ref) < 1e-4
    assert ref.std() > 1.0  # a model with real logit spread, not a near-constant one


def test_config_is_read_as_transformers_reads_it(checkpoints: dict[str, tuple[Path, Any]]) -> None:
    for case, (path, hf) in checkpoints.items():
        c = load_model(path).config
        hc = hf.config
        assert (c.num_layers, c.num_q_heads, c.num_kv_heads, c.head_dim, c.vocab_size) == (
            hc.num_hidden_layers, hc.num_attention_heads, hc.num_key_value_heads,
            getattr(hc, "head_dim", None) or hc.hidden_size // hc.num_attention_heads,
            hc.vocab_size), case
        assert c.tie_embeddings == hc.tie_word_embeddings and c.rms_eps == hc.rms_norm_eps
        # The inverse frequencies (theta and any scaling) are transformers' own, bit for bit.
        assert torch.equal(rope_inv_freq(c), hf.model.rotary_emb.inv_freq.float()), case
    scaled = load_model(checkpoints["llama3_scaled"][0]).config
    assert scaled.rope_scaling is not None and scaled.rope_scaling.rope_type == "llama3"
    assert scaled.rope_theta == 500000.0
    assert load_model(checkpoints["qwen2_tied"][0]).config.qkv_bias
    assert load_model(checkpoints["mistral_window"][0]).config.max_seq_len == 512


def test_llama3_scaling_is_not_a_no_op(checkpoints: dict[str, tuple[Path, Any]]) -> None:
    """The scaled checkpoint's test would fail if the scaling were ignored."""
    path, hf = checkpoints["llama3_scaled"]
    model = load_model(path)
    plain = LlamaModel(ModelConfig(**{**model.config.to_dict(), "rope_scaling": None}),
                       model.weights)
    tokens = torch.arange(2, 202)
    with torch.no_grad():
        ref = hf(tokens[None]).logits[0].float()
    assert _rel(plain.forward_dense(tokens), ref) > 1e-3


@pytest.mark.parametrize("case", ["llama3_scaled", "qwen2_tied", "mistral_window"])
def test_engine_greedy_equals_transformers_generate(checkpoints: dict[str, tuple[Path, Any]],
                                                    case: str) -> None:
    """The literal claim: transformers' greedy ``generate`` (its KV cache, its attention) and
    radixkv's engine (radix cache, paged KV, reference ops) emit the same tokens in float32."""
    path, hf = checkpoints[case]
    model = load_model(path)
    rng = np.random.default_rng(3)
    stem = rng.integers(0, 300, size=40)
    prompts = [np.concatenate([stem, rng.integers(0, 300, size=n)]) for n in (5, 23, 61)]
    prompts.append(rng.integers(0, 300, size=17))
    new = 16
    engine = Engine(model, EngineConfig())
    done = engine.run([Request(f"r{i}", p, SamplingParams(max_new_tokens=new), arrival_step=i)
                       for i, p in enumerate(prompts)])
    ours = {c.request.rid: c.outputs[0] for c in done}
    hf.generation_config.eos_token_id = None
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ids = torch.from_numpy(p)[None]
            # An explicit mask: generate would otherwise mask prompt tokens equal to the pad id.
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        assert out[0, p.size :].tolist() == ours[f"r{i}"], (case, i)
    assert engine.stats.cached_tokens > 0  # the shared stem came from the radix cache


def test_verify_with_transformers_reference(checkpoints: dict[str, tuple[Path, Any]]) -> None:
    path, hf = checkpoints["qwen2_untied"]
    model = load_model(path)
    prompt = np.arange(5, 45, dtype=np.int32)
    done = Engine(model, EngineConfig(keep_logits=True)).run(
        [Request("a", prompt, SamplingParams(max_new_tokens=8)),
         Request("b", prompt, SamplingParams(max_new_tokens=8, temperature=0.9, n=2, seed=4))])
    result = verify(model, done, reference=TransformersReference(hf))
    assert result.ok and result.reference == "transformers" and result.to_dict()["reference"]
    assert result.max_abs_logit_diff is not None and result.max_abs_logit_diff < 1e-3
    done[0].outputs[0][3] = (done[0].outputs[0][3] + 1) % 300
    bad = verify(model, done, reference=TransformersReference(hf))
    assert not bad.ok and "transformers" in bad.first_mismatches[0]


def test_sharded_checkpoint_and_dtype_conversion(tmp_path: Path) -> None:
    hf = write_checkpoint("llama_tied_headdim", tmp_path / "s", max_shard_size="40KB")
    index = json.loads((tmp_path / "s" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    model = load_model(tmp_path / "s")
    tokens = torch.arange(3, 90)
    with torch.no_grad():
        ref = hf(tokens[None]).logits[0].float()
    assert _rel(model.forward_dense(tokens), ref) < 1e-4
    half = load_model(tmp_path / "s", dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16
    assert all(t.dtype == torch.bfloat16 for t in to_hf_state_dict(half).values())
    assert _rel(half.forward_dense(tokens), ref) < 0.1  # bf16 weights: close, not exact


def test_named_shapes_match_published_sizes() -> None:
    assert {"tiny", "llama3-8b", "qwen2.5-7b"} <= set(SHAPES)
    # Parameter counts of the published checkpoints these shapes copy.
    assert shape_config("llama3-8b").num_params() == 8_030_261_248
    assert shape_config("qwen2.5-7b").num_params() == 7_615_616_512
    assert shape_config("llama3.2-1b").num_params() == 1_235_814_400
    assert shape_config("qwen2.5-0.5b").num_params() == 494_032_768
    assert shape_config("mistral-7b").num_params() == 7_248_023_552
    with pytest.raises(rk.InvalidArgument, match="unknown model shape"):
        shape_config("gpt-5")


@pytest.mark.parametrize("name", [s for s in SHAPES if s != "tiny"])
def test_random_shapes_round_trip_through_transformers(name: str) -> None:
    """Every named shape's architecture (shrunk) runs in transformers with our weights and gives
    our logits: to_hf_state_dict + hf_config are faithful."""
    model = model_from_shape(name, seed=5, num_layers=2, hidden_size=64, intermediate_size=96,
                             vocab_size=200, num_q_heads=4, num_kv_heads=2, head_dim=32,
                             max_seq_len=256)
    assert model.config.architecture == shape_config(name).architecture
    cfg = hf_config(model)
    assert cfg["architectures"][0].lower().startswith(cfg["model_type"])
    hf = ck.hf_model(model)
    tokens = torch.arange(1, 120) % 200
    with torch.no_grad():
        ref = hf(tokens[None]).logits[0].float()
    assert _rel(model.forward_dense(tokens), ref) < 1e-4
    again = model_from_shape(name, seed=5, num_layers=2, hidden_size=64, intermediate_size=96,
                             vocab_size=200, num_q_heads=4, num_kv_heads=2, head_dim=32,
                             max_seq_len=256)
    assert torch.equal(again.weights.layers[1].w_qkv, model.weights.layers[1].w_qkv)


def test_tiny_shape_is_the_demo_model() -> None:
    a = model_from_shape("tiny", seed=7)
    b = TinyLlama(ModelConfig(seed=7))
    assert isinstance(a, TinyLlama) and a.config == b.config
    for x, y in zip(to_hf_state_dict(a).values(), to_hf_state_dict(b).values()):
        assert torch.equal(x, y)


def test_bf16_random_weights_are_drawn_in_bf16() -> None:
    model = model_from_shape("qwen2.5-0.5b", dtype=torch.bfloat16, num_layers=1, vocab_size=256,
                             hidden_size=128, intermediate_size=256)
    state = to_hf_state_dict(model)
    assert all(t.dtype == torch.bfloat16 for t in state.values())
    assert "model.layers.0.self_attn.q_proj.bias" in state  # Qwen2: q/k/v bias
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]  # tied
    logits = model.forward_dense(torch.arange(2, 40))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_forward_logits_rows_select_rows() -> None:
    model = model_from_shape("tiny", seed=2, num_layers=2)
    tokens = torch.arange(2, 30)
    positions = torch.arange(28)
    mask = torch.ones(28, 28, dtype=torch.bool).tril()

    def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / 8.0
        return torch.einsum("hqk,khd->qhd", s.masked_fill(~mask, -torch.inf).softmax(-1), v)

    rows = torch.tensor([27, 3, 3])
    full = model.forward(tokens, positions, attend)
    assert torch.allclose(full, model.forward_dense(tokens), atol=1e-4)
    assert torch.allclose(model.forward(tokens, positions, attend, rows), full[rows], atol=1e-4)


# -- bad checkpoints ----------------------------------------------------------------------


@pytest.fixture
def good(tmp_path: Path, checkpoints: dict[str, tuple[Path, Any]]) -> Path:
    dst = tmp_path / "ck"
    shutil.copytree(checkpoints["qwen2_untied"][0], dst)
    return dst


@pytest.fixture
def no_alloc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Allocation of weights must not start for a bad checkpoint."""
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("weights allocated before the checkpoint was validated")

    monkeypatch.setattr(ck, "_empty_weights", boom)


def _edit_config(path: Path, **changes: Any) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _rewrite_weights(path: Path, edit: Any) -> Path:
    from safetensors.torch import load_file, save_file

    file = path / "model.safetensors"
    tensors = load_file(str(file))
    edit(tensors)
    save_file(tensors, str(file), metadata={"format": "pt"})
    return file


def _raises(path: Path, match: str, file: Path | None = None, tensor: str | None = None
            ) -> CheckpointError:
    with pytest.raises(CheckpointError, match=match) as info:
        load_model(path)
    err = info.value
    assert isinstance(err, rk.InvalidArgument)
    if file is not None:
        assert err.file == str(file) and str(file) in str(err)
    if tensor is not None:
        assert err.tensor == tensor and tensor in str(err)
    assert "\n" not in str(err)
    return err


def test_missing_config(good: Path, no_alloc: None) -> None:
    (good / "config.json").unlink()
    _raises(good, "config.json is missing", good / "config.json")
    _raises(good / "nope", "not a folder")


def test_missing_weights(good: Path, no_alloc: None) -> None:
    (good / "model.safetensors").rename(good / "pytorch_model.bin")
    _raises(good, r"no \*.safetensors weights \(found pytorch_model.bin", good)


def test_missing_shard(tmp_path: Path, no_alloc: None) -> None:
    write_checkpoint("mistral_window", tmp_path / "s", max_shard_size="40KB")
    shard = sorted((tmp_path / "s").glob("*.safetensors"))[-1]
    shard.unlink()
    _raises(tmp_path / "s", f"shard {shard.name} listed by model.safetensors.index.json is missing",
            shard)


@pytest.mark.parametrize("changes,match", [
    (dict(architectures=["GPT2LMHeadModel"], model_type="gpt2"), "unsupported architecture"),
    (dict(architectures=None, model_type="gemma"), "unsupported model_type 'gemma'"),
    (dict(architectures=["LlamaForCausalLM"]), "does not match model_type 'qwen2'"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
     "unsupported RoPE scaling type 'yarn'"),
    (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "unsupported RoPE scaling type"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "llama3 RoPE scaling without"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
    (dict(num_attention_heads=3), "num_q_heads"),
    (dict(hidden_size=None), "config.json has no 'hidden_size'"),
    (dict(num_hidden_layers="4"), "'num_hidden_layers' is '4', expected a number"),
    (dict(vocab_size=True), "'vocab_size' is True, expected a number"),
    (dict(rope_scaling=None, rope_parameters={"full_attention": {"rope_theta": 1e4}}),
     "per-layer RoPE parameters are not supported"),
    (dict(rope_scaling=None, rope_parameters={"rope_type": "default", "rope_theta": 0}),
     "rope_theta is 0, expected a number > 0"),
    (dict(rope_scaling=None, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                              "partial_rotary_factor": 0.5}),
     "partial_rotary_factor 0.5 is not supported"),
    (dict(rope_scaling={"rope_type": "linear", "factor": "x"}), "bad linear RoPE scaling"),
    (dict(max_position_embeddings=None, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
     "llama3 RoPE scaling without 'original_max_position_embeddings'"),
])
def test_unsupported_config(good: Path, no_alloc: None, changes: dict[str, Any],
                            match: str) -> None:
    _edit_config(good, **changes)
    _raises(good, match, good / "config.json")


def test_config_not_an_object(good: Path, no_alloc: None) -> None:
    cfg = good / "config.json"
    cfg.write_text("[1, 2]")
    _raises(good, "config.json is not a JSON object", cfg)
    cfg.write_text("{unquoted: 1}")
    _raises(good, "config.json is not readable JSON", cfg)


def test_linear_rope_scaling_is_read(good: Path) -> None:
    _edit_config(good, rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    config = inspect_checkpoint(good).config
    assert config.rope_theta == 5e5
    assert config.rope_scaling is not None and config.rope_scaling.rope_type == "linear"
    assert config.rope_scaling.factor == 2.0


def test_bad_shard_index_and_a_tensor_stored_twice(tmp_path: Path, no_alloc: None) -> None:
    from safetensors.torch import load_file, save_file

    path = tmp_path / "s"
    write_checkpoint("mistral_window", path, max_shard_size="40KB")
    index = path / "model.safetensors.index.json"
    good_index = index.read_text()
    index.write_text("{}")
    _raises(path, "unreadable shard index", index)
    index.write_text(good_index)
    shards = sorted(path.glob("*.safetensors"))
    first, last = shards[0], shards[-1]
    name, tensor = next(iter(load_file(str(first)).items()))
    tensors = load_file(str(last))
    tensors[name] = tensor
    save_file(tensors, str(last), metadata={"format": "pt"})
    _raises(path, f"tensor also stored in {first.name}", last, name)


def test_shape_disagrees_with_config(good: Path, no_alloc: None) -> None:
    _edit_config(good, intermediate_size=120)
    _raises(good, r"shape \[112, 64\] disagrees with config.json, which implies \[120, 64\]",
            good / "model.safetensors", "model.layers.0.mlp.gate_proj.weight")


def test_missing_and_unexpected_tensors(good: Path, no_alloc: None) -> None:
    name = "model.layers.1.self_attn.k_proj.bias"
    _rewrite_weights(good, lambda t: t.pop(name))
    _raises(good, "tensor missing", good, name)
    extra = "model.layers.2.mlp.up_proj.weight"
    _rewrite_weights(good, lambda t: t.update({name: torch.zeros(32), extra: torch.zeros(1)}))
    _raises(good, "unexpected tensor", good / "model.safetensors",
            "model.layers.2.mlp.up_proj.weight")


def test_unsupported_dtype(good: Path, no_alloc: None) -> None:
    name = "model.norm.weight"
    _rewrite_weights(good, lambda t: t.update({name: t[name].to(torch.int8)}))
    _raises(good, "dtype I8 is not supported", good / "model.safetensors", name)


def test_truncated_or_corrupt_file(good: Path, no_alloc: None) -> None:
    file = good / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 100])
    _raises(good, r"truncated\?", file)
    file.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    _raises(good, "header is not JSON", file)
    file.write_bytes(b"abc")
    _raises(good, "shorter than its header", file)
    file.write_bytes(b"\xff" * 8 + b"{}")
    _raises(good, "bad header length", file)
    file.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
    _raises(good, "header is not a JSON object", file)
    entry = b'{"model.norm.weight": {"dtype": "F32"}}'
    file.write_bytes(len(entry).to_bytes(8, "little") + entry)
    _raises(good, "malformed header entry", file, "model.norm.weight")


def test_inspect_reads_headers_only(good: Path) -> None:
    info = inspect_checkpoint(good)
    assert info.config.architecture == "qwen2" and info.dtype == torch.float32
    assert info.tensors["lm_head.weight"].shape == (300, 64)
    with pytest.raises(CheckpointError, match="max_seq_len 5000 > the model's 1024"):
        inspect_checkpoint(good, max_seq_len=5000)
    assert inspect_checkpoint(good, max_seq_len=256).config.max_seq_len == 256


def test_hf_baseline_cpu_smoke(tmp_path: Path) -> None:
    """bench/hf_baseline.py end to end on the CPU: transformers' continuous batching serves two
    traces (chat follow-ups, n = 4 forks) on the tiny shape's weights and writes its JSON."""
    import importlib.util
    import sys

    bench = Path(__file__).resolve().parent.parent / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("hf_baseline", bench / "hf_baseline.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = tmp_path / "hf.json"
        assert mod.main(["--device", "cpu", "--requests", "4", "--layers", "1", "--scale", "0.05",
                         "--traces", "chat,parallel", "--out", str(out)]) == 0
    finally:
        sys.path.remove(str(bench))
    data = json.loads(out.read_text())
    assert data["requests_per_trace"] == 4 and data["attn_implementation"] == "paged|sdpa"
    rows = {r["trace"]: r for r in data["traces"]}
    assert set(rows) == {"chat", "parallel"}
    assert rows["parallel"]["sequences"] == 4 and rows["parallel"]["requests"] == 1
    assert rows["chat"]["requests"] == 4  # one conversation, four turns, each after the last
    for r in rows.values():
        assert r["total_tokens_per_s"] > 0 and r["ttft_s"]["p50"] is not None
        assert r["generated_tokens"] == r["sequences"] * max(1, round(128 * 0.05))
