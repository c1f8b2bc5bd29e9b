"""The engine loop at scale (issue 11): allocation as needed with preemption, one KV pool of any
page size, n > 1 on cached prefixes, refused requests, contiguous / radix-off baselines, the
decode-graph path, one host-to-device copy per step. Every run is checked token for token against
dense recomputation (float32, CPU)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import radixkv as rk
from radixkv.engine import ModelConfig, Request, SamplingParams, SchedulerConfig, TinyLlama, verify
from radixkv.engine.engine import Engine, EngineConfig

SMALL = ModelConfig(num_layers=2, hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=64,
                    intermediate_size=128, vocab_size=256, max_seq_len=512, seed=5)
REPO = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model() -> TinyLlama:
    return TinyLlama(SMALL)


def _requests(seed: int, count: int, stem_len: int = 60, n: int = 1, temperature: float = 0.0,
              new: int = 10) -> list[Request]:
    rng = np.random.default_rng(seed)
    stem = rng.integers(2, SMALL.vocab_size, size=stem_len, dtype=np.int32)
    out = []
    for i in range(count):
        tail = rng.integers(2, SMALL.vocab_size, size=int(rng.integers(5, 40)), dtype=np.int32)
        out.append(Request(f"r{i}", np.concatenate([stem, tail]),
                           SamplingParams(max_new_tokens=new, n=n, temperature=temperature, seed=i),
                           arrival_step=i // 3))
    return out


def _exact(model: TinyLlama, done: list) -> None:
    res = verify(model, done)
    assert res.sequences > 0 and res.ok, res.first_mismatches


def _drained(engine: Engine) -> None:
    engine.kv.cache.check()
    engine.kv.pool.check()
    assert engine.kv.cache.protected_size == 0 and engine.kv.pool.num_out == 0
    assert engine.scheduler.reserved_pages == 0 and engine.idle


def _run(model: TinyLlama, reqs: list[Request], **kw: object) -> tuple[Engine, list]:
    sched = kw.pop("scheduler", SchedulerConfig(max_batch_tokens=96, chunk_size=48))
    engine = Engine(model, EngineConfig(keep_logits=True, scheduler=sched, **kw))  # type: ignore[arg-type]
    done = engine.run(reqs)
    assert sorted(c.request.rid for c in done) == sorted(r.rid for r in reqs)
    return engine, done


@pytest.mark.parametrize("page_size", [1, 16])
def test_tiny_pool_preempts_and_stays_exact(model: TinyLlama, page_size: int) -> None:
    """A pool a few requests fill: running sequences get preempted (recompute) and come back;
    every token still equals dense recomputation and the pool drains."""
    reqs = _requests(1, 10, new=40) + _requests(2, 3, n=3, temperature=0.7, new=16)
    for i, r in enumerate(reqs):
        r.rid = f"q{i}"
    sched = SchedulerConfig(max_batch_tokens=96, chunk_size=48, decode_reserve=0.0,
                            decode_reserve_init=0.0)
    engine, done = _run(model, reqs, pool_tokens=256, page_size=page_size, scheduler=sched)
    assert engine.scheduler.preemptions > 0
    assert engine.stats.recomputed_tokens > 0
    assert sum(c.preemptions for c in done) == engine.scheduler.preemptions
    assert engine.stats.peak_in_use_tokens <= 256
    _exact(model, done)
    _drained(engine)


@pytest.mark.parametrize("page_size", [1, 16])
def test_page_sizes_are_exact(model: TinyLlama, page_size: int) -> None:
    reqs = _requests(3, 9) + _requests(4, 2, n=4, temperature=0.9)
    for i, r in enumerate(reqs):
        r.rid = f"p{i}"
    engine, done = _run(model, reqs, pool_tokens=2048, page_size=page_size)
    _exact(model, done)
    hits = {c.request.rid: c.cached_prompt_tokens for c in done}
    assert sum(hits.values()) > 0
    _drained(engine)


def test_parallel_sampling_hits_the_prefix_cache(model: TinyLlama) -> None:
    """n > 1 requests match the radix cache like any other: the prompt an earlier request left
    there is not prefilled again, and the branches share its pages."""
    rng = np.random.default_rng(9)
    prompt = rng.integers(2, SMALL.vocab_size, size=70, dtype=np.int32)
    first = Request("first", prompt, SamplingParams(max_new_tokens=4))
    wide = Request("wide", np.concatenate([prompt, [7, 8, 9]]).astype(np.int32),
                   SamplingParams(max_new_tokens=12, n=4, temperature=0.8, seed=3), arrival_step=20)
    engine, done = _run(model, [first, wide], pool_tokens=1024, page_size=16)
    got = {c.request.rid: c for c in done}
    assert got["wide"].cached_prompt_tokens == 64  # the first request's whole pages (70 // 16 * 16)
    assert len(got["wide"].outputs) == 4 and len({tuple(o) for o in got["wide"].outputs}) > 1
    assert engine.kv.forks == 3 and engine.kv.cow_copies == 3  # 73 tokens end inside a page
    _exact(model, done)
    _drained(engine)


def test_refused_request_does_not_disturb_the_others(model: TinyLlama) -> None:
    reqs = _requests(5, 6)
    engine = Engine(model, EngineConfig(pool_tokens=512, keep_logits=True))
    for r in reqs[:3]:
        engine.submit(r)
    before = (engine.kv.pool.available, len(engine.scheduler.waiting))
    ids = np.arange(2, 500, dtype=np.int32) % 250 + 2
    too_long = Request("ctx", ids, SamplingParams(max_new_tokens=20))
    too_big = Request("pool", ids[:298], SamplingParams(max_new_tokens=100, n=4))
    with pytest.raises(rk.InvalidArgument, match="max_seq_len"):
        engine.submit(too_long)
    with pytest.raises(rk.InvalidArgument, match="pool has"):
        engine.submit(too_big)
    with pytest.raises(rk.InvalidArgument, match="token id 256 outside"):
        engine.submit(Request("vocab", np.array([5, 256], np.int32)))
    assert (engine.kv.pool.available, len(engine.scheduler.waiting)) == before
    done = engine.run(reqs[3:])
    assert sorted(c.request.rid for c in done) == sorted(r.rid for r in reqs)
    assert engine.stats.refused == 3
    _exact(model, done)
    _drained(engine)


def test_contiguous_and_radix_off_give_the_same_tokens(model: TinyLlama) -> None:
    """The baselines change memory and reuse, never tokens. Contiguous admission never preempts
    and never runs more than its reservations allow; radix off reuses nothing."""
    reqs = _requests(6, 9, new=16)
    paged, a = _run(model, reqs, pool_tokens=512, page_size=16)
    cont_sched = SchedulerConfig(max_batch_tokens=96, chunk_size=48, admission="contiguous")
    cont, b = _run(model, reqs, pool_tokens=512, page_size=16, scheduler=cont_sched)
    off, c = _run(model, reqs, pool_tokens=512, page_size=16, radix=False)
    outs = [{x.request.rid: x.outputs for x in d} for d in (a, b, c)]
    assert outs[0] == outs[1] == outs[2]
    assert cont.scheduler.preemptions == 0
    assert off.stats.cached_tokens == 0 and paged.stats.cached_tokens > 0
    assert off.stats.prefill_computed - off.stats.recomputed_tokens >= sum(r.prompt.size for r in reqs)
    smallest = min(cont.scheduler.reservation(s) for s in _fresh_seqs(cont, reqs))
    assert max(t.batch for t in cont.stats.timings) <= cont.kv.num_pages // smallest
    assert max(t.batch for t in paged.stats.timings) > max(t.batch for t in cont.stats.timings)
    _exact(model, a)
    for e in (paged, cont, off):
        _drained(e)


def _fresh_seqs(engine: Engine, reqs: list[Request]) -> list:
    from radixkv.engine.seq import Group, Seq

    return [Seq(Group(r, 0.0, [[]]), 0, r.prompt.tolist(), None) for r in reqs]


def test_decode_graph_layout_equals_eager_and_one_copy_per_step(model: TinyLlama) -> None:
    """On the CPU the CUDA-graph path (fixed bucket layouts, padding rows) runs eagerly: it must
    give the eager path's tokens and logits; every forward gets its inputs in one staging send."""
    reqs = _requests(7, 7, new=12) + _requests(8, 2, n=3, temperature=0.6)
    for i, r in enumerate(reqs):
        r.rid = f"g{i}"
    eager, a = _run(model, reqs, pool_tokens=1024, page_size=16, cuda_graphs=False)
    graph, b = _run(model, reqs, pool_tokens=1024, page_size=16, cuda_graphs=True)
    assert graph.stats.graph_steps > 0 and eager.stats.graph_steps == 0
    la = {x.request.rid: x for x in a}
    for x in b:
        y = la[x.request.rid]
        assert x.outputs == y.outputs
        for p, q in zip(x.logits, y.logits):
            assert np.allclose(np.stack(p), np.stack(q), atol=1e-4)
    busy = graph.stats.steps - graph.stats.idle_steps
    assert graph.staging.sends == busy
    _exact(model, b)


def test_timings_and_latencies_are_recorded(model: TinyLlama) -> None:
    engine, done = _run(model, _requests(10, 5), pool_tokens=1024)
    for c in done:
        assert c.ttft_s > 0 and c.tpot_s > 0
    t = engine.stats.timings
    assert len(t) == engine.stats.steps - engine.stats.idle_steps
    assert all(x.host_pre >= 0 and x.host_post >= 0 and x.total > 0 for x in t)
    assert {x.kind for x in t} >= {"decode"}


def test_bench_serve_cpu_smoke(tmp_path: Path) -> None:
    """bench/serve.py end to end on the CPU (tiny model, short traces), JSON and PNG written."""
    sys.path.insert(0, str(REPO / "bench"))
    import serve  # noqa: PLC0415

    out, png = tmp_path / "serve.json", tmp_path / "serve.png"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rc = serve.main(["--device", "cpu", "--model-shape", "tiny", "--requests", "8", "--scale",
                         "0.04", "--budget-seqs", "3", "--max-len", "128", "--json", str(out), "--png",
                         str(png)])
    assert rc == 0
    rep = json.loads(out.read_text())
    labels = [r["label"] for r in rep["results"]]
    assert labels[:3] == ["shared_prefix", "shared_prefix radix off", "shared_prefix page 1"]
    assert {"unique", "chat", "parallel"} <= set(labels)
    for r in rep["results"]:
        assert r["requests"] > 0 and r["output_tokens"] > 0 and r["total_tokens_per_s"] > 0
        assert r["roofline_fraction"] > 0
    assert rep["results"][0]["prefix_hit_rate"] > 0.5
    assert rep["results"][1]["prefix_hit_rate"] == 0.0
    assert {"unique paged, budget", "unique contig max-len 128",
            "unique contig exact (oracle)"} <= set(labels)
    assert set(rep["ratios"]) >= {"radix on/off (a)", "paged/contiguous max-len 128 (b)",
                                  "paged/contiguous exact-oracle (b)"}
    assert png.stat().st_size > 1000


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_graphs_equal_eager_with_no_reference_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU: decode steps replay CUDA graphs and give the eager steps' tokens (bf16 logits
    within rounding), and no op may fall back to the pure-torch reference (issue 16)."""
    import radixkv.ops
    from radixkv.ops import reference

    monkeypatch.setenv("RADIXKV_OPS_BACKEND", "extension")  # a failed build raises, never falls back

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a radixkv op fell back to the reference implementation")

    for name in ("store_kv", "paged_decode", "extend_attention", "copy_blocks"):
        monkeypatch.setattr(reference, name, refuse)
    cfg = ModelConfig(num_layers=2, hidden_size=256, num_q_heads=8, num_kv_heads=2, head_dim=128,
                      intermediate_size=512, vocab_size=512, max_seq_len=1024, seed=11)
    model = _gpu_model(cfg)
    assert radixkv.ops.backend(model.device) == "extension"
    reqs = _requests(11, 12, new=20) + _requests(12, 3, n=4, temperature=0.7, new=12)
    for i, r in enumerate(reqs):
        r.rid = f"c{i}"
    runs = []
    for graphs in (False, True):
        engine = Engine(model, EngineConfig(pool_tokens=4096, page_size=16, keep_logits=True,
                                            cuda_graphs=graphs))
        done = engine.run(reqs)
        if graphs:
            assert engine.graphs is not None and engine.graphs.disabled is None, engine.graphs.disabled
            assert engine.stats.graph_steps > 0 and engine.graphs.replays > 0
        assert engine.stats.h2d_copies == engine.stats.steps - engine.stats.idle_steps
        runs.append({c.request.rid: c for c in done})
        _drained(engine)
    compared = 0
    for rid, g in runs[1].items():
        e = runs[0][rid]
        for go, eo, gl, el in zip(g.outputs, e.outputs, g.logits, e.logits):
            for i in range(min(len(go), len(eo))):
                a, b = torch.from_numpy(gl[i]), torch.from_numpy(el[i])
                assert float((a - b).abs().max()) <= 0.05 * float(b.abs().max()) + 0.05, (rid, i)
                compared += 1
                if go[i] != eo[i]:
                    break
    assert compared > 100


def _gpu_model(cfg: ModelConfig) -> TinyLlama:
    """A model whose forward the graphs can capture: checkpoint.model_from_shape's when present."""
    try:
        from radixkv.engine.checkpoint import model_from_shape  # type: ignore[attr-defined]
    except ImportError:
        return TinyLlama(cfg, "cuda", torch.bfloat16)
    import dataclasses

    overrides = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ModelConfig)
                 if f.name in ("num_layers", "hidden_size", "num_q_heads", "num_kv_heads",
                               "head_dim", "intermediate_size", "vocab_size", "max_seq_len")}
    return model_from_shape("tiny", "cuda", torch.bfloat16, 11, **overrides)
