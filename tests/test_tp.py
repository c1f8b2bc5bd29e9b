"""Tensor parallelism on the CPU: 2 gloo ranks (spawned processes), float32, checkpoints written by
transformers. The sharded engine's tokens equal the single-rank engine's and transformers' greedy
``generate``; a GQA model with fewer KV heads than ranks replicates its KV head; a killed worker
stops the engine with an error naming its rank, quickly."""

from __future__ import annotations

import functools
import os
import random
import signal
import time
import types
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
import torch

import radixkv as rk
from radixkv.engine import Engine, EngineConfig, Request, SamplingParams
from radixkv.engine.checkpoint import load_model, model_from_shape
from radixkv.engine.model import ModelConfig
from radixkv.engine.parallel_model import TPLlama, shard_plan
from radixkv.engine.tp import TensorParallel, TensorParallelError, _stuck_rank

transformers = pytest.importorskip("transformers")

from _checkpoints import build_hf  # noqa: E402

# Page 4 with prompts ending inside a page: the n = 2 fork copies a page (copy-on-write), which
# must reach the other rank's pool; a shared stem comes from the radix cache.
CONFIG = EngineConfig(pool_tokens=512, page_size=4)
NEW = 10
# One forkserver (torch imported once) serves every session of the run: each starts in seconds.
START = "forkserver"


def _requests(vocab: int) -> list[Request]:
    rng = np.random.default_rng(3)
    stem = rng.integers(0, vocab, size=30)
    out = [Request(f"r{i}", np.concatenate([stem, rng.integers(0, vocab, size=k)]).astype(np.int32),
                   SamplingParams(max_new_tokens=NEW), arrival_step=i)
           for i, k in enumerate((5, 23, 2))]
    out.append(Request("fork", rng.integers(0, vocab, size=13).astype(np.int32),
                       SamplingParams(max_new_tokens=NEW, n=2, temperature=0.8, seed=5),
                       arrival_step=1))
    return out


def _outputs(done: list[Any]) -> dict[str, list[list[int]]]:
    return {c.request.rid: c.outputs for c in done}


def _write(tmp: Path, case: str, kv_heads: int, **extra: Any) -> tuple[Path, Any]:
    import _checkpoints

    cfg_name, model_name, base = _checkpoints.CASES[case]
    saved = dict(_checkpoints.COMMON)
    _checkpoints.COMMON["num_key_value_heads"] = kv_heads
    _checkpoints.CASES[case] = (cfg_name, model_name, {**base, **extra})
    try:
        hf = build_hf(case)
    finally:
        _checkpoints.COMMON.clear()
        _checkpoints.COMMON.update(saved)
        _checkpoints.CASES[case] = (cfg_name, model_name, base)
    path = tmp / f"{case}_kv{kv_heads}"
    hf.save_pretrained(str(path))
    return path, hf


def _hf_greedy(hf: Any, prompt: np.ndarray) -> list[int]:
    hf.generation_config.eos_token_id = None
    ids = torch.from_numpy(prompt.astype(np.int64))[None]
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    return out[0, prompt.size :].tolist()


def _check_tp(path: Path, hf: Any, world: int = 2) -> None:
    single = load_model(path)
    ref = _outputs(Engine(single, CONFIG).run(_requests(single.config.vocab_size)))
    factory = functools.partial(load_model, path)
    with TensorParallel(factory, world, timeout_s=30, start_method=START) as tp:
        eng = tp.engine(CONFIG)
        done = _outputs(eng.run(_requests(single.config.vocab_size)))
        assert tp.copied_pages > 0  # the fork's copy-on-write travelled to the other rank
        assert eng.stats.cached_tokens > 0
    assert done == ref
    for req in _requests(single.config.vocab_size):
        if req.params.temperature == 0:
            assert done[req.rid][0] == _hf_greedy(hf, req.prompt), req.rid


def test_tp2_gqa_fewer_kv_heads_than_ranks(tmp_path: Path) -> None:
    """Llama 3.1-style, ONE KV head over 2 ranks: each rank keeps a copy of it."""
    torch.set_num_threads(1)
    path, hf = _write(tmp_path, "llama3_scaled", kv_heads=1)
    model = load_model(path)
    assert [shard_plan(model.config, r, 2).kv_heads for r in (0, 1)] == [(0, 1), (0, 1)]
    _check_tp(path, hf)


def test_tp2_qwen2_bias_tied(tmp_path: Path) -> None:
    """q/k/v biases, tied embeddings, 2 KV heads split one per rank."""
    torch.set_num_threads(1)
    path, hf = _write(tmp_path, "qwen2_tied", kv_heads=2)
    _check_tp(path, hf)


def test_killed_worker_names_its_rank() -> None:
    torch.set_num_threads(1)
    factory = functools.partial(model_from_shape, "tiny", num_layers=2)
    tp = TensorParallel(factory, 2, timeout_s=20, start_method=START)
    try:
        eng = tp.engine(CONFIG)
        reqs = _requests(512)
        killed_at: list[float] = []

        def on_step(_: Any) -> None:
            if eng.stats.steps == 3:
                os.kill(tp.procs[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
                killed_at.append(time.monotonic())

        with pytest.raises(TensorParallelError, match=r"rank 1 .*exited with code -9") as info:
            eng.run(reqs, on_step=on_step)
        assert info.value.rank == 1
        assert time.monotonic() - killed_at[0] < 10.0
        with pytest.raises(TensorParallelError):  # the session stays failed
            eng.step()
    finally:
        tp.close()
    assert not tp.procs[0].is_alive()


def test_stuck_worker_times_out() -> None:
    """A worker that stops answering (SIGSTOP: alive, silent) fails the step after the group's
    timeout instead of hanging."""
    torch.set_num_threads(1)
    factory = functools.partial(model_from_shape, "tiny", num_layers=2)
    tp = TensorParallel(factory, 2, timeout_s=3, start_method=START)
    try:
        eng = tp.engine(CONFIG)
        for req in _requests(512):
            eng.submit(req)
        eng.step()
        os.kill(tp.procs[0].pid, signal.SIGSTOP)  # type: ignore[arg-type]
        t0 = time.monotonic()
        with pytest.raises(TensorParallelError, match=r"rank 1 .*stuck.*timed out") as info:
            while not eng.idle:
                eng.step()
        assert info.value.rank == 1
        assert time.monotonic() - t0 < 15.0
    finally:
        tp.close()
    assert not tp.procs[0].is_alive()


def _stuck_rank_model(progress: list[int]) -> Optional[int]:
    """The rule written out: the furthest-behind rank behind rank 0, else the lowest rank level
    with it, else none."""
    mine, peers = progress[0], list(enumerate(progress))[1:]
    behind = [(d, r) for r, d in peers if d < mine] or [(d, r) for r, d in peers if d == mine]
    return min(behind)[1] if behind else None


def test_stuck_rank_is_the_one_furthest_behind() -> None:
    assert _stuck_rank([5, 5, 3, 4]) == 2
    assert _stuck_rank([5, 6, 5, 7]) == 2  # level with rank 0; the ranks ahead are not stuck
    assert _stuck_rank([5, 3, 3, 5]) == 1  # a tie goes to the lower rank
    assert _stuck_rank([5, 6, 6]) is None  # every worker caught up
    rng = random.Random(0)
    for _ in range(500):
        progress = [rng.randint(0, 4) for _ in range(rng.randint(2, 6))]
        assert _stuck_rank(progress) == _stuck_rank_model(progress), progress


def test_blame_names_the_stuck_rank_without_processes() -> None:
    """`_blame` on a handle made without processes, every worker alive (it waits its 3 s for a
    death first): the message names the rank `_stuck_rank` picks, its pid and both counts."""
    tp = object.__new__(TensorParallel)
    tp.world, tp.timeout_s, tp._progress = 4, 3.0, [5, 5, 3, 4]
    tp.procs = [types.SimpleNamespace(pid=1000 + r, exitcode=None) for r in range(1, 4)]
    err = tp._blame(TimeoutError("collective timed out\nmore"))
    assert err.rank == 2
    assert str(err).startswith("tensor parallel: rank 2 (pid 1002) is alive but stuck: it finished "
                               "3 collectives, rank 0 5;")
    assert str(err).endswith("(timeout 3s): TimeoutError: collective timed out")


def test_shard_plan_splits_and_refuses() -> None:
    c = ModelConfig(num_q_heads=8, num_kv_heads=2, intermediate_size=10)
    plans = [shard_plan(c, r, 4) for r in range(4)]
    assert [p.q_heads for p in plans] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [p.kv_heads for p in plans] == [(0, 1), (0, 1), (1, 2), (1, 2)]  # q head h reads h // 4
    assert [p.inter for p in plans] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert shard_plan(c, 1, 2).kv_heads == (1, 2)
    with pytest.raises(rk.InvalidArgument, match="query heads"):
        shard_plan(c, 0, 3)
    with pytest.raises(rk.InvalidArgument, match="KV heads"):
        shard_plan(ModelConfig(num_q_heads=12, num_kv_heads=3), 0, 2)


def test_shards_sum_to_the_model() -> None:
    """Without processes: each shard's row-parallel outputs, summed, give the full projection."""
    model = model_from_shape("tiny", num_layers=1)
    x = torch.randn(3, model.config.intermediate_size)
    full = torch.nn.functional.linear(x, model.weights.layers[0].w_down)
    parts = []
    for r in range(2):
        s = TPLlama.from_model(model, r, 2)
        lo, hi = s.plan.inter
        parts.append(torch.nn.functional.linear(x[:, lo:hi], s.weights.layers[0].w_down))
        assert s.weights.lm_head.shape[0] == (model.config.vocab_size if r == 0 else 0)
    assert torch.allclose(parts[0] + parts[1], full, atol=1e-5)


def test_cli_refuses_a_tp_that_does_not_split(capsys: pytest.CaptureFixture[str]) -> None:
    from radixkv.engine.cli import main

    with pytest.raises(SystemExit) as info:
        main(["demo", "--tp", "3", "--quiet"])
    assert info.value.code == 2
    assert "--tp 3: tensor parallel 3: 4 query heads do not split evenly" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_demo_tp2_verifies(tmp_path: Path) -> None:
    """``radixkv demo --tp 2`` on the CPU (spawned gloo ranks): every token verified."""
    import json

    from radixkv.engine.cli import main

    out = tmp_path / "demo.json"
    assert main(["demo", "--tp", "2", "--workload", "fewshot", "--quiet", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["verify"]["ok"] and report["verify"]["tokens"] > 0
    assert report["tensor_parallel"]["ranks"] == 2
