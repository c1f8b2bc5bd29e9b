"""radixkv as SGLang 0.5.23's radix-cache backend, driven as SGLang's scheduler drives it.

Skipped unless ``sglang`` is installed (``make sglang-deps`` installs it without its dependencies,
plus the few its cache modules import). Checks: the plugin is found and registered by SGLang's
own ``load_plugins()`` through the ``sglang.srt.plugins`` entry point; the request lifecycle
(match, lock, evict, alloc, checkpoint, release) on SGLang's CPU pools at page sizes 1 and 16
keeps SGLang's idle leak check after every step of random traces, with ``extra_key``
namespaces, and agrees with SGLang's own ``RadixCache`` on hit lengths and sizes step by step.
"""

from __future__ import annotations

import os
from array import array
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sglang_env  # noqa: E402

_sglang_env.setup_test_module()

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import radixkv  # noqa: E402
from radixkv.integrations import sglang as rk_sglang  # noqa: E402
from radixkv.integrations.sglang.cache import RadixKVPrefixCache  # noqa: E402

plugins = pytest.importorskip("sglang.srt.plugins")
registry = pytest.importorskip("sglang.srt.mem_cache.registry")
from _sglang_replay import Lifecycle  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402

EXAMPLES = int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "100")) // 4 or 1


def test_sglang_load_plugins_registers_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    # SGLang's loader, restricted to this plugin, run as a fresh scheduler process would
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.setenv("SGLANG_PLUGINS", rk_sglang.BACKEND_NAME)
    monkeypatch.setattr(registry, "_RADIX_CACHE_REGISTRY", {})
    assert registry.get_radix_cache_factory("radixkv") is None
    plugins.load_plugins()
    assert registry.get_radix_cache_factory("radixkv") is rk_sglang.build
    plugins.load_plugins()  # idempotent, as SGLang calls it in several processes
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    plugins.load_plugins()  # a second registration attempt must not raise
    assert registry.registered_radix_cache_backends() == ["radixkv"]


def _ctx(lc: Lifecycle, **over: object) -> object:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    params = CacheInitParams(disable=False, req_to_token_pool=lc.r2t,
                             token_to_kv_pool_allocator=lc.alloc, page_size=lc.page_size)
    fields = dict(server_args=None, params=params, is_hybrid_swa=False, is_hybrid_ssm=False,
                  enable_hierarchical_cache=False, disable_radix_cache=False, tp_worker=None,
                  model_config=None, tp_size=1, tp_rank=0, tp_group=None)
    fields.update(over)
    return registry.TreeCacheBuildContext(**fields)


def _lifecycle(page_size: int = 1, capacity: int = 512, factory=RadixKVPrefixCache,
               device: str = "cpu") -> Lifecycle:
    return Lifecycle(factory, capacity=capacity, max_running=8, max_context=256,
                     page_size=page_size, device=device)


def test_factory_builds_and_refuses_with_named_reasons() -> None:
    lc = _lifecycle()
    cache = rk_sglang.build(_ctx(lc))
    assert isinstance(cache, RadixKVPrefixCache) and cache.supports_prefix_sharing()
    assert isinstance(rk_sglang.build(_ctx(lc, disable_radix_cache=True)), RadixKVPrefixCache)
    with pytest.raises(ValueError, match="sliding-window"):
        rk_sglang.build(_ctx(lc, is_hybrid_swa=True))
    with pytest.raises(ValueError, match="HiCache"):
        rk_sglang.build(_ctx(lc, enable_hierarchical_cache=True))
    # What the cache itself refuses, each naming the reason: a policy radixkv has no twin of
    # (SGLang's tlru), EAGLE bigram keys, a page size below 1. Every supported policy builds.
    for field, value, reason in (("eviction_policy", "tlru", "tlru"), ("is_eagle", True, "EAGLE"),
                                 ("page_size", 0, "page_size")):
        params = _ctx(lc).params  # type: ignore[attr-defined]
        setattr(params, field, value)
        with pytest.raises(ValueError, match=reason):
            RadixKVPrefixCache(params)
    for policy in rk_sglang.cache.SUPPORTED_POLICIES:
        params = _ctx(lc).params  # type: ignore[attr-defined]
        params.eviction_policy = policy.upper()  # read case-insensitively
        assert isinstance(RadixKVPrefixCache(params), RadixKVPrefixCache)


@pytest.mark.parametrize("page_size", [1, 16])
def test_lifecycle_shares_prefixes_and_frees_everything(page_size: int) -> None:
    lc = _lifecycle(page_size)
    system = list(range(1000, 1000 + 40))
    reqs = []
    for i in range(3):
        r = lc.make_req(f"r{i}", system + [i] * 5, output_len=4)
        assert lc.admit(r, 4)
        lc.leak_check(reqs + [r])
        reqs.append(r)
    shared = len(system) // page_size * page_size
    assert [lc.prefix_of[r.rid] for r in reqs] == [0, shared, shared]
    # row slots of the shared prefix are the tree's, int64 on the KV device
    idx = lc.cache.path_device_indices(reqs[2].last_node)
    assert len(idx) == reqs[2].kv.cache_protected_len == len(system + [2] * 5) // page_size * (
        page_size)
    assert str(idx.dtype) == "torch.int64"
    assert idx.device.type == "cpu" and idx.is_contiguous()
    row0 = lc.r2t.req_to_token[reqs[0].kv.req_pool_idx, :shared]
    row2 = lc.r2t.req_to_token[reqs[2].kv.req_pool_idx, :shared]
    assert (row0 == row2).all()
    for r in reqs:
        lc.decode(r, [7, 8, 9, 10])
        lc.finish(r)
        reqs_left = [x for x in reqs if x is not r and x.kv.holds_kv]
        lc.leak_check(reqs_left)
    assert lc.cache.protected_size() == 0
    lc.cache.sanity_check()
    got = lc.cache.evict(radixkv_evict_all(lc))
    assert got.num_tokens_evicted == lc.total - lc.alloc.available_size() + got.num_tokens_evicted
    assert lc.alloc.available_size() == lc.total and lc.cache.total_size() == 0


@pytest.mark.parametrize("page_size", [1, 16])
def test_disabled_cache_shares_nothing_and_frees_everything(page_size: int) -> None:
    """--disable-radix-cache: the backend matches, keeps and locks nothing, as SGLang's own
    RadixCache does when disabled, and every request's slots go back to the allocator."""
    def disabled(factory):
        def make(params):
            params.disable = True
            return factory(params)
        return make

    system = list(range(1000, 1000 + 40))
    sides = {}
    for name, factory in (("radixkv", RadixKVPrefixCache), ("sglang", RadixCache)):
        lc = _lifecycle(page_size, factory=disabled(factory))
        reqs = []
        for i in range(3):
            r = lc.make_req(f"r{i}", system + [i] * 5, output_len=4)
            assert lc.admit(r, 4)
            reqs.append(r)
            lc.leak_check(reqs)
        sizes = (lc.cache.total_size(), lc.cache.evictable_size(), lc.cache.protected_size())
        for r in reqs:
            lc.decode(r, [7, 8, 9, 10])
            lc.finish(r)
        sides[name] = ([lc.prefix_of[r.rid] for r in reqs], sizes, lc.alloc.available_size(),
                       lc.total)
    assert sides["radixkv"] == sides["sglang"]
    prefixes, sizes, available, total = sides["radixkv"]
    assert prefixes == [0, 0, 0] and sizes == (0, 0, 0) and available == total


def test_last_checkpoint_releases_the_lock_in_the_same_call() -> None:
    # a running request's checkpoint moves its lock to the inserted end; a finished one's
    # (release_kv_cache's, which unlocks next) releases it in the same call: nothing of the
    # request stays protected, req.lock is None, and the unlock that follows calls nothing
    lc = _lifecycle(1)
    a = lc.make_req("a", list(range(100, 130)), output_len=5)
    b = lc.make_req("b", list(range(100, 120)) + [7] * 4, output_len=3)
    assert lc.admit(a, 5) and lc.admit(b, 3)
    assert lc.cache.protected_size() == 30 + 4  # a's prompt; b's own tail past the shared 20
    assert a.lock is not None and a.lock.node == a.last_node and a.last_node.lock_ref == 1
    lc.decode(a, [1, 2, 3, 4, 5])
    calls: list = []
    unlock = lc.cache.unlock
    lc.cache.unlock = lambda lock: (calls.append(lock), unlock(lock))[1]  # this instance's
    lc.finish(a)  # release_kv_cache: checkpoint, free_kv_row, unlock(req.lock), on_release
    del lc.cache.unlock
    assert a.lock is None and calls == [None]  # the unlock had no lock left to release
    assert lc.cache.protected_size() == 20 + 4  # b's path only
    assert a.last_node.lock_ref == 0 and a.last_node.depth == 34
    lc.leak_check([b])
    lc.decode(b, [9, 9, 9])
    lc.finish(b)
    assert lc.cache.protected_size() == 0
    lc.leak_check()
    lc.cache.sanity_check()


def test_prefix_indices_of_a_repeated_prefix_are_kept_while_their_node_lives() -> None:
    # requests matching the same node to the same length get the kept tensor (no second read
    # of the tree); it stays good across evictions that spare its node, and a node evicted
    # since raises StaleHandle as the tree's read does
    from types import SimpleNamespace

    import numpy as np
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    lc = _lifecycle(1)
    c = lc.cache
    shared, other = list(range(100, 140)), list(range(500, 530))
    for i, prompt in enumerate((shared + [1, 2], shared + [3, 4], other + [5])):
        r = lc.make_req(f"r{i}", prompt, output_len=2)
        assert lc.admit(r, 2)
        lc.decode(r, [9, 9])
        lc.finish(r)
    tree = c.tree

    def req_for(tokens: list, n: int) -> SimpleNamespace:
        length, node = tree.match_node(np.array(tokens, dtype=np.int64))
        assert length >= n
        return SimpleNamespace(prefix_len=n, last_node=node)

    # a result read from the tree is a new tensor; a kept one is the same object again
    # another node, then another length: each read from the tree (and kept instead)
    o = c.prefix_device_indices(req_for(other, 30))
    assert o.tolist() == tree.path_slots(req_for(other, 30).last_node).tolist()
    first = c.prefix_device_indices(req_for(shared, 40))
    assert first is not o
    assert first.tolist() == tree.path_slots(req_for(shared, 40).last_node).tolist()[:40]
    # the same node (a handle from a new match) and length: the kept tensor, no read
    assert c.prefix_device_indices(req_for(shared, 40)) is first
    short = c.prefix_device_indices(req_for(shared, 20))
    assert short.tolist() == first.tolist()[:20]
    kept = c.prefix_device_indices(req_for(shared, 40))
    assert kept is not first and kept.tolist() == first.tolist()
    # an eviction that spares the node (locked): the kept tensor is still handed out
    held = req_for(shared, 40).last_node
    tree.lock(held)
    assert c.evict(EvictParams(num_tokens=5)).num_tokens_evicted > 0
    assert c.prefix_device_indices(req_for(shared, 40)) is kept
    # the node evicted since: StaleHandle, kept or not
    stale = SimpleNamespace(prefix_len=40, last_node=held)
    tree.unlock(held)
    c.evict(EvictParams(num_tokens=c.evictable_size()))
    assert tree.total_size == 0
    with pytest.raises(radixkv.StaleHandle):
        c.prefix_device_indices(stale)


def radixkv_evict_all(lc: Lifecycle) -> object:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    return EvictParams(num_tokens=lc.cache.evictable_size())


def test_extra_key_namespaces_never_share() -> None:
    lc = _lifecycle()
    prompt = list(range(50, 90))
    a = lc.make_req("a", prompt, 2, extra_key="lora-a")
    assert lc.admit(a, 2)
    b = lc.make_req("b", prompt, 2, extra_key="lora-b")
    assert lc.admit(b, 2)
    c = lc.make_req("c", prompt, 2, extra_key="lora-a")
    assert lc.admit(c, 2)
    d = lc.make_req("d", prompt, 2)  # None differs from any string
    assert lc.admit(d, 2)
    assert [lc.prefix_of[r.rid] for r in (a, b, c, d)] == [0, 0, len(prompt) - 1, 0]
    lc.leak_check([a, b, c, d])


# A trace step: admit a new request (prompt from a few shared stems, a namespace, an output
# length), admit a request that repeats a running one's prompt or extends it by that one's
# output (a branch: whichever inserts the shared part second holds duplicates), or finish the
# oldest running one.
_step = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 3), st.integers(1, 70),
              st.sampled_from([None, None, "ns"]), st.integers(1, 30)),
    st.tuples(st.just("again"), st.integers(0, 7), st.integers(1, 30)),
    st.tuples(st.just("finish")),
)


@pytest.mark.parametrize("page_size", [1, 16])
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=40), data=st.data())
def test_random_traces_keep_the_idle_leak_check(page_size: int, steps: list, data) -> None:
    _replay_side_by_side(page_size, steps,
                         lambda: data.draw(st.lists(st.integers(0, 5), max_size=12)))


@pytest.mark.parametrize("page_size", [1, 16])
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=40), data=st.data())
def test_a_table_read_by_copies_keeps_the_same_results(page_size: int, steps: list,
                                                       data) -> None:
    _replay_side_by_side(page_size, steps,
                         lambda: data.draw(st.lists(st.integers(0, 5), max_size=12)),
                         strided_table=True)


def _seeded_steps(seed: int, n: int = 40) -> tuple:
    # a random trace of _step's shape from a seed (for the tests that replay a fixed set)
    import random

    rng = random.Random(seed)
    steps: list = []
    for _ in range(n):
        k = rng.random()
        if k < 0.5:
            steps.append(("admit", rng.randrange(4), rng.randrange(1, 64),
                          rng.choice([None, None, "ns"]), rng.randrange(1, 30)))
        elif k < 0.75:
            steps.append(("again", rng.randrange(8), rng.randrange(1, 30)))
        else:
            steps.append(("finish",))
    return steps, lambda: [rng.randrange(6) for _ in range(rng.randrange(12))]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("strided_table", [False, True])
def test_side_by_side_on_seeded_traces_and_cuda_pools(device: str, page_size: int,
                                                      strided_table: bool) -> None:
    # with device "cuda", as a server keeps them: SGLang's slot lists and request table on the
    # GPU, so the plugin copies table rows to the host, writes duplicates back and hands freed
    # and matched slots over as CUDA tensors; the same hits, sizes and leak check as SGLang's
    # own cache, and the matched slots on the device, equal to the row the first request wrote
    from types import SimpleNamespace

    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for seed in range(12):
        steps, tail = _seeded_steps(seed)
        _replay_side_by_side(page_size, steps, tail, strided_table=strided_table,
                             device=device)
    lc = _lifecycle(page_size, device=device)
    prompt = list(range(100, 100 + 3 * page_size + 5))
    r = lc.make_req("r", prompt, output_len=3)
    assert lc.admit(r, 3)
    first_row = lc.r2t.req_to_token[r.kv.req_pool_idx, :len(prompt)].tolist()
    lc.decode(r, [1, 2, 3])
    lc.finish(r)
    r2 = lc.make_req("r2", prompt, output_len=2)
    assert lc.admit(r2, 2)
    hit = lc.prefix_of["r2"]  # the whole pages of the prompt matched at admission
    assert hit % page_size == 0 and len(prompt) - page_size - 1 <= hit < len(prompt)
    first_row = first_row[:hit]
    # the matched slots, as the admission wrote them into r2's row and as the cache reads them
    assert lc.r2t.req_to_token[r2.kv.req_pool_idx, :hit].tolist() == first_row
    got = lc.cache.prefix_device_indices(SimpleNamespace(prefix_len=hit, last_node=r2.last_node))
    assert got.device.type == device and got.dtype == torch.int64
    assert got.tolist() == first_row
    lc.decode(r2, [7, 7])
    lc.finish(r2)
    lc.leak_check()
    assert lc.cache.protected_size() == 0
    lc.cache.sanity_check()


@pytest.mark.parametrize("page_size", [1, 16])
def test_cuda_pools_ids_reach_the_gpu_without_the_host_waiting(page_size: int) -> None:
    # A server queues its forward pass before the scheduler's cache calls; a call that copied
    # ids from pageable memory would wait for that pass. With PyTorch's sync debug mode set to
    # "error", any call that makes the host wait for the GPU raises: match, lock, the matched
    # slots, unlock and eviction (leaves and parked duplicates) must not.
    from types import SimpleNamespace

    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    lc = _lifecycle(page_size, device="cuda")
    c = lc.cache
    prompt = list(range(100, 100 + 3 * page_size + 5))
    # two requests share the prompt and decode the same output at once: the second to finish
    # finds the output's pages cached by the first, so its row's copies are duplicates the
    # plugin parks (handed to the allocator by the eviction below)
    out = list(range(7, 7 + 2 * page_size + 3))
    r = lc.make_req("r", prompt, output_len=len(out))
    twin = lc.make_req("twin", prompt, output_len=len(out))
    assert lc.admit(r, len(out)) and lc.admit(twin, len(out))
    first_row = lc.r2t.req_to_token[r.kv.req_pool_idx, :len(prompt)].tolist()
    for q in (r, twin):
        lc.decode(q, out)
        lc.finish(q)
    assert c._frees.tokens > 0
    r2 = lc.make_req("r2", prompt, output_len=2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):  # the mode catches a waiting copy
            torch.arange(4).to("cuda")
        r2.init_next_round_input(c)
        lock = c.lock(r2.last_node)
        got = c.prefix_device_indices(r2)
        again = c.prefix_device_indices(SimpleNamespace(prefix_len=r2.prefix_len,
                                                        last_node=r2.last_node))
        c.unlock(lock)
        evictable = c.evictable_size()
        freed = c.evict(EvictParams(num_tokens=evictable)).num_tokens_evicted
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert r2.prefix_len > 0 and r2.prefix_len % page_size == 0 and c._frees.tokens == 0
    assert got.device.type == "cuda" and got.dtype == torch.int64
    assert got.tolist() == first_row[:r2.prefix_len] and again is got
    assert freed == evictable > 0 and c.evictable_size() == 0
    lc.leak_check()
    c.sanity_check()


def test_match_ending_inside_a_node_refreshes_its_lower_half_as_sglang() -> None:
    # A match ending inside stem 2's 2-token node splits it; SGLang stamps the whole node, so
    # the next eviction takes stem 0's older 29-token output tail, not that 1-token lower half.
    steps = [("admit", 2, 2, None, 1), ("admit", 0, 57, None, 30), ("finish",),
             ("admit", 0, 29, "ns", 30), ("finish",), ("admit", 0, 1, None, 1),
             ("admit", 0, 1, None, 18), ("admit", 1, 64, None, 30), ("admit", 1, 64, "ns", 30),
             ("admit", 2, 1, None, 1)]
    tails = iter([[], [], [], [], [0] * 4, [0] * 10, [0] * 11, [0] * 11])
    _replay_side_by_side(1, steps, lambda: next(tails))


def _with_policy(factory, policy: str):
    def make(params: object) -> object:
        params.eviction_policy = policy  # type: ignore[attr-defined]
        return factory(params)
    return make


def _replay_side_by_side(page_size: int, steps: list, draw_tail, policy: str = "lru",
                         strided_table: bool = False, device: str = "cpu") -> None:
    # radixkv and SGLang's own RadixCache side by side on identical pools and requests;
    # strided_table: radixkv's request table is a strided view, which the plugin cannot read
    # rows of in place (it copies them and writes duplicates back through the pool)
    mine, ref = (_lifecycle(page_size, capacity=256, factory=_with_policy(f, policy),
                            device=device)
                 for f in (RadixKVPrefixCache, RadixCache))
    if strided_table:
        import torch

        table = mine.r2t.req_to_token
        wide = torch.zeros((table.shape[0], 2 * table.shape[1]), dtype=table.dtype,
                           device=table.device)
        mine.r2t.req_to_token = wide[:, ::2]
        assert not mine.r2t.req_to_token.is_contiguous()
    stems = [[s * 1000 + j for j in range(64)] for s in range(4)]
    running: list = []
    for n, step in enumerate(steps):
        if step[0] == "finish" or len(running) >= 6:
            if not running:
                continue
            pair, out = running.pop(0)[:2]
            for lc, r in zip((mine, ref), pair):
                lc.decode(r, out)
                lc.finish(r)
        else:
            if step[0] == "again":
                if not running:
                    continue
                _, k, olen = step
                _, other_out, prompt, ns = running[k % len(running)]
                if k % 2:
                    prompt = prompt + other_out + [k]
            else:
                _, stem, cut, ns, olen = step
                prompt = stems[stem][:cut] + draw_tail()
            if not 2 <= len(prompt) <= 200:  # rows hold 256 (the lifecycle's max_context)
                continue
            out = list(range(9000, 9000 + olen))
            pair = (mine.make_req(f"m{n}", prompt, olen, ns), ref.make_req(f"r{n}", prompt,
                                                                        olen, ns))
            ok = [lc.admit(r, olen) for lc, r in zip((mine, ref), pair)]
            assert ok[0] == ok[1]
            if ok[0]:
                assert mine.prefix_of[pair[0].rid] == ref.prefix_of[pair[1].rid]
                running.append((pair, out, prompt, ns))
        for k, lc in enumerate((mine, ref)):
            lc.leak_check([p[0][k] for p in running])
        # the tree itself as SGLang's; the duplicates the plugin has parked (counted evictable)
        # are exactly what SGLang's allocator already holds back in the reference
        assert mine.cache.tree.evictable_size == ref.cache.evictable_size()
        assert mine.cache.evictable_size() - mine.cache.tree.evictable_size == (
            ref.alloc.available_size() - mine.alloc.available_size())
        assert mine.cache.protected_size() == ref.cache.protected_size()
        mine.cache.sanity_check()
    while running:
        pair, out = running.pop(0)[:2]
        for lc, r in zip((mine, ref), pair):
            lc.decode(r, out)
            lc.finish(r)
    mine.leak_check()
    assert mine.cache.protected_size() == 0


@pytest.mark.parametrize("policy", ["lfu", "slru"])
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=40), data=st.data())
def test_hit_ordered_policies_evict_as_sglang(policy: str, steps: list, data) -> None:
    # lfu / slru order by hit counts, which SGLang counts on insert (beyond the request's
    # inserted_len), not on match: evictable sizes and hit lengths must follow its RadixCache
    _replay_side_by_side(1, steps, lambda: data.draw(st.lists(st.integers(0, 5), max_size=12)),
                         policy)


def _direct_pair(policy: str) -> list:
    lcs = [_lifecycle(capacity=64, factory=_with_policy(f, policy))
           for f in (RadixKVPrefixCache, RadixCache)]
    return [lc.cache for lc in lcs]


def _ins(cache: object, tokens: list, inserted_len: int = 0) -> int:
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    value = torch.tensor(tokens, dtype=torch.int64)
    return cache.insert(InsertParams(key=RadixKey(tokens), value=value,  # type: ignore[attr-defined]
                                     inserted_len=inserted_len)).prefix_len


def _evict_one(cache: object) -> list:
    # which cached tokens one eviction of a single token takes (values equal token ids here;
    # the allocator's free is replaced so nothing outside the tree changes)
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    freed: list = []
    alloc = cache.token_to_kv_pool_allocator  # type: ignore[attr-defined]
    alloc.free = lambda ids: freed.extend(int(x) for x in ids)  # type: ignore[method-assign]
    cache.evict(EvictParams(num_tokens=1))  # type: ignore[attr-defined]
    return sorted(freed)


@pytest.mark.parametrize("policy", ["lfu", "slru"])
def test_hits_count_on_insert_not_match_as_sglang(policy: str) -> None:
    # B inserted twice (a second request: inserted_len 0, one more hit), A matched three times
    # (SGLang counts no hit on a match): SGLang's lfu / slru evict A, the less inserted leaf.
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    got = []
    for cache in _direct_pair(policy):
        _ins(cache, a)
        _ins(cache, b)
        assert _ins(cache, b) == 4
        _ins(cache, b, inserted_len=4)  # the same request again: no new hit
        for _ in range(3):
            cache.match_prefix(MatchPrefixParams(key=RadixKey(a)))  # type: ignore[attr-defined]
        got.append(_evict_one(cache))
    assert got[0] == got[1] == a


def test_insert_splitting_a_node_refreshes_its_lower_half_as_sglang() -> None:
    # An insert that diverges inside X's node splits it; SGLang stamps the whole node, so the
    # lower half of X outlives Y (inserted before the split) under lru.
    x, y = [1, 2, 3, 4, 5, 6], [9, 9, 9]
    got = []
    for cache in _direct_pair("lru"):
        _ins(cache, x)
        _ins(cache, y)
        _ins(cache, [1, 2, 3, 7])  # splits X at 3: lower half [4, 5, 6], new leaf [7]
        got.append(_evict_one(cache))
    assert got[0] == got[1] == y


def test_bad_node_handle_is_refused_and_changes_nothing() -> None:
    lc = _lifecycle()
    before = (lc.cache.evictable_size(), lc.cache.protected_size())
    with pytest.raises((radixkv.RadixKVError, TypeError)):
        lc.cache.inc_lock_ref(object())
    assert (lc.cache.evictable_size(), lc.cache.protected_size()) == before


def test_evict_for_alloc_is_evict_and_refuses_joint_reclaim() -> None:
    """The plugin's own ``evict_for_alloc`` (the base class's without its ``evict`` call)
    frees and counts exactly what ``evict`` does on a twin cache; a joint-reclaim predicate
    is refused, as the base class refuses it, with nothing freed."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    twins = [_lifecycle(capacity=400) for _ in range(2)]
    for lc in twins:
        for i in range(6):
            r = lc.make_req(f"r{i}", [i * 100 + j for j in range(40)], 3)
            assert lc.admit(r, 3)
            lc.decode(r, [1, 2, 3])
            lc.finish(r)
    a, b = twins
    before = (a.alloc.available_size(), a.cache.evictable_size())
    with pytest.raises(NotImplementedError):
        a.cache.evict_for_alloc(EvictParams(num_tokens=50),
                                allocation_reclaim_satisfied=lambda: True)
    assert (a.alloc.available_size(), a.cache.evictable_size()) == before
    for n in (0, 50, 1, 10_000):
        got_a = a.cache.evict_for_alloc(EvictParams(num_tokens=n))
        got_b = b.cache.evict(EvictParams(num_tokens=n))
        assert got_a == got_b
        assert (a.alloc.available_size(), a.cache.evictable_size()) == (
            b.alloc.available_size(), b.cache.evictable_size())
        a.leak_check()
    assert a.cache.evictable_size() == 0 and a.alloc.available_size() == a.total


@pytest.mark.parametrize("policy", rk_sglang.cache.SUPPORTED_POLICIES)
def test_every_policy_evicts_only_unlocked_and_keeps_the_leak_check(policy: str) -> None:
    def make(params: object) -> RadixKVPrefixCache:
        params.eviction_policy = policy  # type: ignore[attr-defined]
        return RadixKVPrefixCache(params)

    lc = _lifecycle(capacity=160, factory=make)
    held = lc.make_req("held", list(range(500, 540)), 2)
    assert lc.admit(held, 2)
    done = []
    for i in range(12):  # distinct prompts: the pool (160) runs short and must evict
        r = lc.make_req(f"x{i}", [i * 100 + j for j in range(30)], 2)
        assert lc.admit(r, 2)
        lc.decode(r, [1, 2])
        lc.finish(r)
        done.append(r)
        lc.leak_check([held])
    assert lc.alloc.available_size() < lc.total  # evictions happened and the pool still balances
    # the running request's prefix was never evicted
    again = lc.make_req("again", list(range(500, 540)), 2)
    assert lc.admit(again, 2) and lc.prefix_of["again"] == 39
    lc.cache.sanity_check()


def test_kv_events_reach_sglang_as_its_event_types() -> None:
    from sglang.srt.disaggregation.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

    def make(params: object) -> RadixKVPrefixCache:
        params.enable_kv_cache_events = True  # type: ignore[attr-defined]
        return RadixKVPrefixCache(params)

    lc = _lifecycle(page_size=16, factory=make)
    assert [type(e) for e in lc.cache.take_events()] == [AllBlocksCleared]
    r = lc.make_req("r", list(range(64)) + [7], 2)
    assert lc.admit(r, 2)
    stored = lc.cache.take_events()
    assert stored and all(isinstance(e, BlockStored) for e in stored)
    assert [t for e in stored for t in e.token_ids] == list(range(64))
    # as SGLang's UnifiedRadixCache emits them: one event a new leaf, one hash a page, the
    # pages chained across events; on the device tier
    assert all(e.block_size == 16 and len(e.token_ids) == 16 * len(e.block_hashes)
               for e in stored)
    assert all(e.medium == "GPU" and e.lora_id is None and e.cache_salt is None for e in stored)
    assert stored[0].parent_block_hash is None
    assert [e.parent_block_hash for e in stored[1:]] == [e.block_hashes[-1] for e in stored[:-1]]
    hashes = [h for e in stored for h in e.block_hashes]
    assert len(hashes) == 4 and len(set(hashes)) == 4
    # a second request sharing 2 pages stores only its 2 new pages, chained to the 2nd
    r2 = lc.make_req("r2", list(range(32)) + list(range(100, 132)) + [7], 2)
    assert lc.admit(r2, 2)
    more = lc.cache.take_events()
    assert [t for e in more for t in e.token_ids] == list(range(100, 132))
    assert more[0].parent_block_hash == hashes[1]
    assert len({h for e in more for h in e.block_hashes} | set(hashes)) == 6
    lc.decode(r2, [5, 6])
    lc.finish(r2)
    lc.decode(r, [5, 6])
    lc.finish(r)
    lc.cache.take_events()
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    freed = lc.cache.evict(EvictParams(num_tokens=lc.cache.evictable_size()))
    assert freed.num_tokens_evicted > 0
    removed = lc.cache.take_events()
    assert removed and all(isinstance(e, BlockRemoved) for e in removed)
    gone = [h for e in removed for h in e.block_hashes]
    assert set(hashes) <= set(gone) and len(gone) == len(set(gone)) == 6
    lc.cache.reset()
    assert [type(e) for e in lc.cache.take_events()] == [AllBlocksCleared]
    lc.leak_check()


def test_native_calls_refuse_bad_input_and_change_nothing() -> None:
    """The calls the native base implements (match, checkpoint, prefix slots) refuse bad
    input with a named error before anything changes: the tree, the request's fields and
    the kept prefix result stay as they were."""
    from types import SimpleNamespace

    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams, TreeLock
    from sglang.srt.mem_cache.radix_cache import RadixKey

    lc = _lifecycle()
    c = lc.cache
    a = lc.make_req("a", list(range(100, 140)), output_len=3)
    assert lc.admit(a, 3)
    kept = c.prefix_device_indices(SimpleNamespace(prefix_len=40, last_node=a.last_node))

    def state() -> tuple:
        kv = a.kv
        return (c.tree.dump(), c.evictable_size(), c.protected_size(), kv.cache_protected_len,
                kv.cache_inserted_len, a.lock, a.last_node, a.last_node.lock_ref)

    before = state()
    with pytest.raises(ValueError, match="bigram"):
        c.match_prefix(MatchPrefixParams(key=RadixKey(list(range(100, 140)), is_bigram=True)))
    with pytest.raises(radixkv.InvalidArgument, match="ids"):
        c.match_prefix(MatchPrefixParams(key=RadixKey(array("d", [1.0, 2.0]))))
    # a lock held through a node of another cache; a negative checkpoint end
    other = _lifecycle().cache
    lock = a.lock
    a.lock = TreeLock(other.tree.match_node([1])[1], lock.receipt)
    with pytest.raises(radixkv.InvalidArgument, match="another RadixCache"):
        c.checkpoint(a, up_to=40)
    a.lock = lock
    with pytest.raises(radixkv.InvalidArgument, match="up_to"):
        c.checkpoint(a, up_to=-1)
    # more slots than the path holds; a node that is no radixkv Node
    with pytest.raises(radixkv.InvalidArgument, match="limit"):
        c.prefix_device_indices(SimpleNamespace(prefix_len=41, last_node=a.last_node))
    with pytest.raises(radixkv.InvalidArgument, match="Node"):
        c.prefix_device_indices(SimpleNamespace(prefix_len=3, last_node=object()))
    # slots of a float dtype reach radixkv as they are (no silent cast to ids) and are refused
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    with pytest.raises(radixkv.InvalidArgument, match="integer"):
        c.insert(InsertParams(key=RadixKey(list(range(100, 144))),
                              value=torch.arange(44, dtype=torch.float32)))
    # the native state's setters check what they are given
    with pytest.raises(TypeError):
        c.tree = object()
    with pytest.raises(radixkv.InvalidArgument, match="page_size"):
        c.page_size = 0
    assert state() == before and c.page_size == 1
    assert c.prefix_device_indices(SimpleNamespace(prefix_len=40, last_node=a.last_node)) is kept
    lc.decode(a, [1, 2, 3])
    lc.finish(a)
    lc.leak_check()


def test_native_base_refuses_use_before_it_is_bound() -> None:
    from collections import namedtuple

    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    base = radixkv._core.SGLangCacheBase()
    with pytest.raises(RuntimeError, match="_bind"):
        base.match_prefix(MatchPrefixParams(key=RadixKey([1, 2, 3])))
    with pytest.raises(RuntimeError, match="_bind"):
        base.checkpoint(object(), up_to=0)
    wrong = namedtuple("wrong", ["length", "node", "host", "best"])
    with pytest.raises(radixkv.InvalidArgument, match="device_prefix_len"):
        base._bind(match_result=wrong, evict_result=tuple, tree_lock=tuple, receipt=None,
                   tokens_view=None, row_views=None, row_copy=None, as_tensor=None,
                   empty_indices=None)
