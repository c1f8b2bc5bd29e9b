"""``radixkv demo``'s arguments are all checked before any work: a bad one is one line on stderr
and exit status 2. A checkpoint is served and verified through transformers' own model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from radixkv.engine import cli
from radixkv.engine.cli import main


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither a model nor an engine may be built when an argument is bad."""
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("work started before the arguments were checked")

    for name in ("load_model", "model_from_shape", "Engine"):
        monkeypatch.setattr(cli, name, boom)


def _bad(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> str:
    capsys.readouterr()  # drop anything printed before (e.g. save_pretrained's progress bar)
    with pytest.raises(SystemExit) as info:
        main(["demo", "--quiet", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert err.startswith("radixkv") and "error:" in err and match in err, err
    return err


@pytest.mark.parametrize("argv,match", [
    (["--chunk-size", "0"], "--chunk-size: must be >= 1, got 0"),
    (["--max-batch-tokens", "-3"], "--max-batch-tokens: must be >= 1"),
    (["--pool-tokens", "x"], "'x' is not an integer"),
    (["--page-size", "0"], "--page-size: must be >= 1"),
    (["--pool-tokens", "1000"], "must be a multiple of page_size (16)"),
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--layers", "0"], "--layers: must be >= 1"),
    (["--threads", "-1"], "--threads: must be >= 0"),
    (["--model-shape", "gpt-5"], "invalid choice: 'gpt-5'"),
    (["--workload", "nope"], "invalid choice: 'nope'"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
    (["--device", "meta"], "only cpu and cuda are supported"),
    (["--device", "what?"], "is not a device"),
    (["--pool-tokens", "256"], "--pool-tokens 256 too small for this workload: request"),
    (["--workload", "parallel", "--pool-tokens", "128"],
     "--pool-tokens 128 too small for this workload: request parallel"),
    (["--json", "/missing/dir/x.json"], "directory /missing/dir does not exist"),
    (["--model", "/definitely/not/here"], "checkpoint path is not a folder"),
    (["--model", "x", "--model-shape", "tiny"], "not allowed with argument"),
])
def test_bad_argument_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], no_work: None,
                                             argv: list[str], match: str) -> None:
    _bad(capsys, argv, match)


def test_json_path_checks(capsys: pytest.CaptureFixture[str], no_work: None,
                          tmp_path: Path) -> None:
    _bad(capsys, ["--json", str(tmp_path)], "is a directory")
    (tmp_path / "f").write_text("")
    _bad(capsys, ["--json", str(tmp_path / "f" / "x.json")], "does not exist")


def test_context_too_short_for_workload(capsys: pytest.CaptureFixture[str], no_work: None,
                                        tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   max_position_embeddings=128)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(tmp_path))
    _bad(capsys, ["--model", str(tmp_path), "--workload", "fewshot"],
         "the model's context too small for this workload")
    _bad(capsys, ["--model", str(tmp_path), "--layers", "2"], "random-weight models only")


def test_not_a_checkpoint(capsys: pytest.CaptureFixture[str], no_work: None,
                          tmp_path: Path) -> None:
    _bad(capsys, ["--model", str(tmp_path)], "config.json is missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2",
                                                      "architectures": ["GPT2LMHeadModel"]}))
    _bad(capsys, ["--model", str(tmp_path)], "unsupported architecture")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_cuda_without_gpu(capsys: pytest.CaptureFixture[str], no_work: None) -> None:
    _bad(capsys, ["--device", "cuda"], "torch sees no GPU")


def test_reference_transformers_needs_transformers(capsys: pytest.CaptureFixture[str],
                                                   no_work: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    _bad(capsys, ["--reference", "transformers"], "transformers is not installed")


def test_without_torch_one_line_and_exit_2() -> None:
    code = ("import sys; sys.modules['torch'] = None; from radixkv.__main__ import main; "
            "sys.exit(main(['demo']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "torch" in proc.stderr, proc.stderr
    assert "pip install" in proc.stderr and "Traceback" not in proc.stderr


def test_checkpoint_demo_verifies_through_transformers(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's proof that a checkpoint is served exactly: the demo on the CPU in float32,
    every sequence recomputed by transformers' own model, named in the report and the JSON."""
    pytest.importorskip("transformers")
    from _checkpoints import write_checkpoint

    ckpt = tmp_path / "ck"
    write_checkpoint("qwen2_untied", ckpt)
    out = tmp_path / "r.json"
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line
    capsys.readouterr()
    rc = main(["demo", "--model", str(ckpt), "--dtype", "float32", "--workload", "fewshot",
               "--json", str(out)])
    assert rc == 0
    assert "sequences match transformers recomputation" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["verify"]["reference"] == "transformers" and report["verify"]["ok"]
    assert report["verify"]["tokens"] == report["requests"]["generated_tokens"] > 0
    assert report["model_source"] == str(ckpt)
    assert report["model"]["architecture"] == "qwen2" and report["model"]["qkv_bias"]
    rc = main(["demo", "--model", str(ckpt), "--dtype", "float32", "--workload", "fewshot",
               "--json", str(out), "--quiet", "--reference", "dense"])
    assert rc == 0 and json.loads(out.read_text())["verify"]["reference"] == "dense"


def test_model_shape_demo(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    rc = main(["demo", "--model-shape", "mistral-7b", "--layers", "1", "--hidden", "64",
               "--workload", "parallel", "--json", str(out), "--quiet"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["verify"]["reference"] == "dense" and report["verify"]["ok"]
    assert report["model"]["vocab_size"] == 32768 and report["model"]["num_layers"] == 1
    assert report["model_source"] == "random weights, shape mistral-7b"
