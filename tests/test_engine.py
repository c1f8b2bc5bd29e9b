"""The demo engine: generation through the radix cache, paged KV and radixkv.ops must give exactly
the tokens of a dense recomputation (float32, CPU), in every scheduling situation."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import radixkv as rk
from radixkv.engine import (
    Engine,
    EngineConfig,
    ModelConfig,
    Request,
    SamplingParams,
    SchedulerConfig,
    TinyLlama,
    verify,
)
from radixkv.engine import workloads
from radixkv.engine.cli import main

SMALL = ModelConfig(num_layers=2, hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=64,
                    intermediate_size=128, vocab_size=256, max_seq_len=1024, seed=3)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model() -> TinyLlama:
    return TinyLlama(SMALL)


def _engine(model: TinyLlama, **kw: object) -> Engine:
    sched = kw.pop("scheduler", SchedulerConfig())
    return Engine(model, EngineConfig(keep_logits=True, scheduler=sched, **kw))  # type: ignore[arg-type]


def _check_drained(engine: Engine) -> None:
    """After a run nothing is locked or reserved and every slot is free or cached."""
    cache, pool = engine.kv.cache, engine.kv.pool
    cache.check()
    pool.check()
    assert cache.protected_size == 0 and pool.num_out == 0
    assert engine.scheduler.reserved_pages == 0 and not engine.scheduler.running
    assert pool.available + cache.total_size == engine.kv.num_slots


def _assert_exact(model: TinyLlama, done: list, eos: int | None = None) -> None:
    result = verify(model, done, eos)
    assert result.sequences > 0 and result.tokens > 0
    assert result.ok, result.first_mismatches
    assert result.max_abs_logit_diff is not None and result.max_abs_logit_diff < 1e-3


def test_multi_turn_chat_reuses_history_and_matches_dense(model: TinyLlama) -> None:
    wl = workloads.chat(seed=1, vocab=SMALL.vocab_size, conversations=3, turns=3, system_len=48)
    engine = _engine(model)
    done = engine.run(wl.requests, wl.on_finish)
    assert len(done) == 9
    _assert_exact(model, done)
    by_id = {c.request.rid: c for c in done}
    for c in range(3):
        for t in (1, 2):
            prev = by_id[f"chat{c}.turn{t - 1}"]
            # The whole previous turn (prompt + answer, minus the last token, which has no KV),
            # in whole 16-token pages.
            had = prev.request.prompt.size + len(prev.outputs[0]) - 1
            assert by_id[f"chat{c}.turn{t}"].cached_prompt_tokens >= had // 16 * 16
    _check_drained(engine)


def test_free_running_dense_greedy_equals_engine(model: TinyLlama) -> None:
    """The literal claim, without teacher forcing: generate greedily by recomputing the whole
    sequence densely for every new token, and get the engine's tokens."""
    wl = workloads.chat(seed=9, vocab=SMALL.vocab_size, conversations=2, turns=2, system_len=40)
    done = _engine(model).run(wl.requests, wl.on_finish)
    for comp in done:
        seq = comp.request.prompt.astype(np.int64).tolist()
        for _ in range(len(comp.outputs[0])):
            logits = model.forward_dense(torch.tensor(seq))
            seq.append(int(torch.argmax(logits[-1])))
        assert seq[comp.request.prompt.size :] == comp.outputs[0]


def test_shared_prefix_is_computed_once(model: TinyLlama) -> None:
    wl = workloads.fewshot(seed=2, vocab=SMALL.vocab_size, questions=8, prefix_len=200)
    engine = _engine(model, page_size=1)  # token-granular sharing: the whole 200-token prefix
    done = engine.run(wl.requests)
    _assert_exact(model, done)
    s = engine.stats
    assert s.cached_tokens + s.prefill_computed == s.prompt_tokens
    # The 200-token prefix is computed by the first request only (in-batch deferral + publish).
    assert s.prefill_computed == 200 + sum(r.prompt.size - 200 for r in wl.requests)
    assert s.cached_tokens >= 7 * 200 - 7
    _check_drained(engine)


def test_chunked_prefill_matches_dense(model: TinyLlama) -> None:
    rng = np.random.default_rng(5)
    reqs = [Request(f"r{i}", rng.integers(2, SMALL.vocab_size, size=n, dtype=np.int32),
                    SamplingParams(max_new_tokens=6)) for i, n in enumerate((150, 97, 33, 64))]
    engine = _engine(model, scheduler=SchedulerConfig(max_batch_tokens=48, chunk_size=20))
    done = engine.run(reqs)
    _assert_exact(model, done)
    assert engine.stats.prefill_chunks >= sum(-(-r.prompt.size // 20) for r in reqs)
    assert engine.stats.prefill_computed == sum(r.prompt.size for r in reqs)
    _check_drained(engine)


def test_small_pool_evicts_mid_run_and_stays_exact(model: TinyLlama) -> None:
    wl = workloads.build("all", seed=4, vocab=SMALL.vocab_size)
    engine = _engine(model, pool_tokens=416)
    done = engine.run(wl.requests, wl.on_finish)
    assert len(done) == wl.total_requests
    assert engine.kv.cache.evicted_tokens > 0
    _assert_exact(model, done)
    _check_drained(engine)


def test_parallel_sampling_forks_and_copies_on_write(model: TinyLlama) -> None:
    wl = workloads.parallel(seed=6, vocab=SMALL.vocab_size, prompts=3, n=4, out_len=20)
    engine = _engine(model, page_size=16)
    done = engine.run(wl.requests)
    _assert_exact(model, done)
    assert engine.kv.forks == 3 * 3
    assert engine.kv.cow_copies > 0
    for c in done:
        assert len(c.outputs) == 4 and len({tuple(o) for o in c.outputs}) > 1
    s = engine.stats
    # Branches share the prompt's pages: held slots stay below every branch's own pages.
    assert sum(x.in_use_tokens for x in s.samples) < sum(x.logical_page_tokens for x in s.samples)
    _check_drained(engine)


def test_greedy_branches_equal_single_request(model: TinyLlama) -> None:
    """Two memory paths, one answer: n=3 greedy branches (forked pages) equal an n=1 request
    (radix slots), so fork + copy-on-write never corrupts the shared prompt."""
    prompt = np.random.default_rng(7).integers(2, SMALL.vocab_size, size=45, dtype=np.int32)
    engine = _engine(model, page_size=16)
    done = engine.run([Request("one", prompt, SamplingParams(max_new_tokens=12)),
                       Request("three", prompt, SamplingParams(max_new_tokens=12, n=3))])
    outs = {c.request.rid: c.outputs for c in done}
    assert outs["three"] == outs["one"] * 3
    assert engine.kv.cow_copies >= 2
    _check_drained(engine)


def test_metadata_passes_the_validated_ops(model: TinyLlama, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the public, validating wrappers with host-side index checks on, every segment's
    metadata (pages in range, L_q <= kv_lens, indptr ends) must be accepted."""
    import radixkv.ops

    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    wl = workloads.build("all", seed=8, vocab=SMALL.vocab_size)
    engine = Engine(model, EngineConfig(pool_tokens=512), ops=radixkv.ops)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU: using the reference ops"
        done = engine.run(wl.requests, wl.on_finish)
    assert len(done) == wl.total_requests
    _check_drained(engine)


@pytest.mark.parametrize("seed", range(4))
def test_random_traces_stay_exact_and_drain(model: TinyLlama, seed: int) -> None:
    """Random prompts built from a few shared stems, random arrivals, n in {1, 2, 3}, greedy or
    sampled, tight pools and small chunks: every token still matches dense recomputation."""
    rng = np.random.default_rng(100 + seed)
    stems = [rng.integers(2, SMALL.vocab_size, size=int(rng.integers(10, 90)), dtype=np.int32)
             for _ in range(3)]
    reqs = []
    for i in range(14):
        stem = stems[int(rng.integers(0, 3))][: int(rng.integers(1, 90))]
        tail = rng.integers(2, SMALL.vocab_size, size=int(rng.integers(1, 30)), dtype=np.int32)
        n = int(rng.choice([1, 1, 2, 3]))
        temp = float(rng.choice([0.0, 0.7]))
        params = SamplingParams(max_new_tokens=int(rng.integers(1, 12)), n=n, temperature=temp,
                                seed=i)
        reqs.append(Request(f"r{i}", np.concatenate([stem, tail]), params,
                            arrival_step=int(rng.integers(0, 20))))
    sched = SchedulerConfig(max_batch_tokens=int(rng.integers(8, 64)),
                            chunk_size=int(rng.integers(4, 40)), max_running=int(rng.integers(2, 8)))
    page = int(rng.choice([1, 4, 16]))
    engine = _engine(model, pool_tokens=256, page_size=page, scheduler=sched)
    done = engine.run(reqs)
    assert sorted(c.request.rid for c in done) == sorted(r.rid for r in reqs)
    _assert_exact(model, done)
    _check_drained(engine)


def test_namespaces_never_share_prefixes(model: TinyLlama) -> None:
    prompt = np.arange(2, 70, dtype=np.int32)
    engine = _engine(model, page_size=1)
    reqs = [Request(f"{ns}{i}", prompt, SamplingParams(max_new_tokens=4), arrival_step=10 * i,
                    namespace=ns) for i, ns in enumerate(["a", "b", "a", None])]
    cached = {c.request.rid: c.cached_prompt_tokens for c in engine.run(reqs)}
    assert cached == {"a0": 0, "b1": 0, "a2": prompt.size - 1, "None3": 0}
    _check_drained(engine)


def test_verify_catches_a_wrong_token(model: TinyLlama) -> None:
    engine = _engine(model)
    prompt = np.arange(2, 40, dtype=np.int32)
    done = engine.run([Request("x", prompt, SamplingParams(max_new_tokens=5))])
    assert verify(model, done).ok
    done[0].outputs[0][2] = (done[0].outputs[0][2] + 1) % SMALL.vocab_size
    bad = verify(model, done)
    assert not bad.ok and bad.mismatched_tokens >= 1


def test_eos_stops_generation(model: TinyLlama) -> None:
    prompt = np.arange(2, 30, dtype=np.int32)
    probe = _engine(model).run([Request("p", prompt, SamplingParams(max_new_tokens=8))])
    eos = probe[0].outputs[0][3]  # make the 4th greedy token the end of sequence
    engine = _engine(model, eos_token_id=eos)
    done = engine.run([Request("p", prompt, SamplingParams(max_new_tokens=8))])
    out = done[0].outputs[0]
    assert out[-1] == eos and eos not in out[:-1] and len(out) <= 4
    _assert_exact(model, done, eos)
    _check_drained(engine)


def test_bad_input_raises_typed_errors_and_changes_nothing(model: TinyLlama) -> None:
    with pytest.raises(rk.InvalidArgument, match="n must be"):
        SamplingParams(n=0)
    with pytest.raises(rk.InvalidArgument, match="prompt"):
        Request("empty", np.array([], dtype=np.int32))
    engine = _engine(model, pool_tokens=64)
    with pytest.raises(rk.InvalidArgument, match="pool has 4 .64 tokens"):
        engine.submit(Request("big", np.arange(2, 80, dtype=np.int32)))
    with pytest.raises(rk.InvalidArgument, match="KV pages"):
        engine.submit(Request("wide", np.arange(2, 40, dtype=np.int32),
                              SamplingParams(max_new_tokens=20, n=8)))
    with pytest.raises(rk.InvalidArgument, match="max_seq_len 1024"):
        _engine(model).submit(Request("long", np.arange(2, 1000, dtype=np.int32) % 250 + 2,
                                      SamplingParams(max_new_tokens=100)))
    with pytest.raises(rk.InvalidArgument, match="token id 300 outside"):
        _engine(model).submit(Request("vocab", np.array([3, 300], np.int32)))
    with pytest.raises(rk.InvalidArgument, match="multiple of page_size"):
        _engine(model, pool_tokens=100)
    assert engine.idle and engine.kv.pool.available == 64 and engine.stats.refused == 2


def _check_report(report: dict, total_requests: int) -> None:
    r, pc, mem = report["requests"], report["prefix_cache"], report["memory"]
    assert r["requests"] == total_requests
    assert r["sequences"] >= r["requests"]
    # Every prompt token is cached or computed. Preemption adds recomputation, and prefill of
    # generated tokens (a re-admitted sequence prefills its output too).
    recomputed = report["preemption"]["recomputed_tokens"]
    first_time = pc["cached_tokens"] + pc["prefill_tokens_computed"] - recomputed
    if report["preemption"]["preemptions"] == 0:
        assert first_time == r["prompt_tokens"]
    else:
        assert r["prompt_tokens"] <= first_time <= r["prompt_tokens"] + r["generated_tokens"]
    assert pc["hit_rate"] == pytest.approx(pc["cached_tokens"] / max(1, pc["prompt_tokens"]))
    assert report["throughput"]["generated_tokens_per_s"] > 0
    assert 0 < mem["peak_in_use_tokens"] <= mem["pool_tokens"]
    assert mem["peak_in_use_bytes"] == mem["peak_in_use_tokens"] * mem["kv_bytes_per_token"]
    schemes = mem["schemes"]
    assert schemes["this_engine"]["vs_this_engine"] == pytest.approx(1.0)
    for s in schemes.values():
        assert 0.0 <= s["waste"] < 1.0
    # Reserving max length for every request can only waste more than reserving its exact length.
    assert schemes["contiguous_max_len"]["waste"] >= schemes["contiguous_exact_length"]["waste"]
    assert report["verify"]["ok"] and report["verify"]["tokens"] == r["generated_tokens"]


def test_cli_main_writes_consistent_json(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    rc = main(["demo", "--workload", "all", "--json", str(path), "--quiet", "--layers", "2",
               "--hidden", "64", "--pool-tokens", "640"])
    assert rc == 0
    report = json.loads(path.read_text())
    _check_report(report, workloads.build("all", 0, 512).total_requests)
    assert report["parallel"]["forks"] > 0 and report["prefix_cache"]["evicted_tokens"] > 0


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "radixkv", "demo", "--workload", "chat", "--json", str(path),
         "--layers", "2", "--hidden", "64"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in proc.stdout and "prefix cache" in proc.stdout
    _check_report(json.loads(path.read_text()), workloads.build("chat", 0, 512).total_requests)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernels_match_reference_ops_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same engine, same trace: the kernels' logits vs the reference ops' logits (bf16). The
    kernels must really run: a failed build raises instead of falling back to the reference ops,
    and the kernels' own record must show both decode and extend."""
    import radixkv.ops
    import radixkv.ops.reference

    monkeypatch.setenv("RADIXKV_OPS_BACKEND", "extension")
    cfg = ModelConfig(num_layers=2, hidden_size=256, num_q_heads=8, num_kv_heads=2, head_dim=128,
                      intermediate_size=512, vocab_size=512, seed=11)
    gpu_model = TinyLlama(cfg, "cuda", torch.bfloat16)
    wl = workloads.build("all", seed=3, vocab=cfg.vocab_size)
    runs = []
    radixkv.ops.take_kernel_log()  # clear the record
    for ops in (radixkv.ops, radixkv.ops.reference):
        engine = Engine(gpu_model, EngineConfig(keep_logits=True), ops=ops)
        runs.append({c.request.rid: c for c in engine.run(wl.requests, wl.on_finish)})
        _check_drained(engine)
        if ops is radixkv.ops:
            log = radixkv.ops.take_kernel_log()
            assert log & {"mma", "mma_narrow", "cuda_core"}, f"no decode kernel ran: {log}"
            assert log & {"extend", "extend_ws"}, f"no extend kernel ran: {log}"
    compared = 0
    for rid, kernel in runs[0].items():
        ref = runs[1].get(rid)
        if ref is None or not np.array_equal(ref.request.prompt, kernel.request.prompt):
            continue  # an earlier chat turn diverged, so this turn's prompt differs
        for ko, ro, kl, rl in zip(kernel.outputs, ref.outputs, kernel.logits, ref.logits):
            for i in range(min(len(ko), len(ro))):
                a, b = torch.from_numpy(kl[i]), torch.from_numpy(rl[i])
                scale = float(b.abs().max())
                assert float((a - b).abs().max()) <= 0.05 * scale + 0.05, (rid, i)
                compared += 1
                if ko[i] != ro[i]:
                    break  # bf16 rounding picked another token; later logits are not comparable
    assert compared > 100
