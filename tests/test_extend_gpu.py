"""GPU tests of radixkv.ops.extend_attention (the HIP/CUDA kernel) against the float32 reference.

Skipped without a GPU. Every batch mixes requests with no prefix, short and long prefixes, and
extend lengths 1, 7, 64, 333 and 2048; prefixes are not page-aligned; pages are scattered at random
over a pool whose unused slots (padding in last pages, free pages) hold NaN; outputs are poisoned
with NaN before the call. Each request and head is judged on its own against the reference
computed in float32 from the same (upcast) fp16/bf16 inputs (tests/_kernel_checks.py: the worst
||out - ref|| / ||ref|| over (request, head); tolerances from the measured rounding floor).

The metadata checks (check_extend_metadata) run on the CPU too.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import radixkv
from radixkv.ops import reference
from radixkv.ops.extend import check_extend_metadata, extend_attention, extend_flops
from _kernel_checks import assert_close

GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a GPU")

# (prefix, extend) per request: no prefix, short and long prefixes, unaligned to any page size.
MIXED = [(0, 1), (3, 7), (0, 64), (130, 333), (1000, 7), (2500, 64), (17, 2048), (0, 333), (61, 1)]
SMALL = [(0, 1), (5, 7), (0, 64), (77, 333), (300, 1), (1000, 64)]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class Batch:
    """A ragged extend batch over a NaN-poisoned, randomly scattered paged pool."""

    def __init__(self, specs, *, page_size, h_kv, group, dim, dtype, layout="bshd",
                 block_tables=False, seed=0, device="cuda"):
        g = torch.Generator().manual_seed(seed)
        self.specs = specs
        self.layout = layout
        self.page_size = page_size
        lens = [p + e for p, e in specs]
        n_pages = [_ceil(n, page_size) for n in lens]
        num_pages = sum(n_pages) + 5  # a few pages nobody owns (all NaN)
        perm = torch.randperm(num_pages, generator=g)
        pages, at = [], 0
        for n in n_pages:
            pages.append(perm[at : at + n])
            at += n
        shape = (num_pages, page_size, h_kv, dim) if layout == "bshd" else (num_pages, h_kv, page_size, dim)
        self.k_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.v_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
        tok_k = self.k_cache if layout == "bshd" else self.k_cache.permute(0, 2, 1, 3)
        tok_v = self.v_cache if layout == "bshd" else self.v_cache.permute(0, 2, 1, 3)
        for pg, n in zip(pages, lens):
            pos = torch.arange(n)
            page = pg[pos // page_size].to(device)
            off = (pos % page_size).to(device)
            tok_k[page, off] = torch.randn(n, h_kv, dim, generator=g).to(device, dtype)
            tok_v[page, off] = torch.randn(n, h_kv, dim, generator=g).to(device, dtype)
        n_q = sum(e for _, e in specs)
        self.q = (torch.randn(n_q, h_kv * group, dim, generator=g) * 1.5).to(device, dtype)
        i32 = dict(dtype=torch.int32, device=device)
        self.qo_indptr = torch.tensor([0] + list(torch.tensor([e for _, e in specs]).cumsum(0)), **i32)
        self.kv_lens = torch.tensor(lens, **i32)
        if block_tables:
            width = max(n_pages) + 3
            bt = torch.zeros(len(specs), width, dtype=torch.int32)
            for b, pg in enumerate(pages):
                bt[b, : len(pg)] = pg.int()
            self.block_tables = bt.to(device)
            self.kv_indptr = self.kv_indices = None
        else:
            self.block_tables = None
            self.kv_indptr = torch.tensor([0] + list(torch.tensor(n_pages).cumsum(0)), **i32)
            self.kv_indices = torch.cat(pages).to(**i32)

    @property
    def max_q_len(self) -> int:
        """The longest extend of the batch (extend_attention's max_q_len)."""
        return max(e for _, e in self.specs)

    @property
    def max_kv_len(self) -> int:
        """The longest context of the batch (extend_attention's max_kv_len)."""
        return max(p + e for p, e in self.specs)

    def run(self, out=None, sm_scale=None, **kw):
        return radixkv.ops.extend_attention(
            self.q, self.k_cache, self.v_cache, self.qo_indptr, self.kv_indptr, self.kv_indices,
            self.kv_lens, sm_scale, block_tables=self.block_tables, layout=self.layout, out=out, **kw)

    def reference(self, sm_scale=None):
        return reference.extend_attention(
            self.q.float(), self.k_cache, self.v_cache, self.qo_indptr, self.kv_indptr,
            self.kv_indices, self.kv_lens, sm_scale, block_tables=self.block_tables,
            layout=self.layout)


def _check(batch: Batch, dtype, sm_scale=None, **run_kw) -> None:
    out = torch.full_like(batch.q, float("nan"))  # poisoned: every element must be written
    got = batch.run(out=out, sm_scale=sm_scale, **run_kw)
    assert got.data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), f"{int((~torch.isfinite(out)).sum())} non-finite outputs"
    assert_close(out, batch.reference(sm_scale), dtype, batch.qo_indptr.tolist())
    assert radixkv.ops.take_errors() == [], "good input recorded a fault"


@pytest.fixture(scope="module", autouse=True)
def _extension():
    if not GPU:
        yield
        return
    from radixkv.ops import loader

    loader.load()
    assert hasattr(torch.ops.radixkv, "extend_attention"), "extend_attention op not registered"
    old = os.environ.get("RADIXKV_OPS_BACKEND")
    os.environ["RADIXKV_OPS_BACKEND"] = "extension"  # never fall back to the reference silently
    yield
    if old is None:
        os.environ.pop("RADIXKV_OPS_BACKEND", None)
    else:
        os.environ["RADIXKV_OPS_BACKEND"] = old


# ----------------------------------------------------------------------------- accuracy grid


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_mixed_batch(dtype, dim, group):
    # Rotate page size, layout and page-table form over the grid so every combination appears.
    idx = [64, 128, 256].index(dim) * 3 + [1, 4, 8].index(group)
    page_size = (1, 16, 64)[idx % 3]
    layout = ("bshd", "bhsd")[idx % 2]
    batch = Batch(MIXED, page_size=page_size, h_kv=2, group=group, dim=dim, dtype=dtype,
                  layout=layout, block_tables=bool(idx % 4 == 3), seed=idx)
    _check(batch, dtype)


@gpu
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("tables", [False, True], ids=["csr", "block_tables"])
def test_paging_forms(page_size, layout, tables):
    batch = Batch(SMALL, page_size=page_size, h_kv=3, group=4, dim=128, dtype=torch.bfloat16,
                  layout=layout, block_tables=tables, seed=page_size)
    _check(batch, torch.bfloat16)


# Requests of similar length: with max_q_len given, the kernel launches in rank order (the
# heaviest tile of every request first; CTAs past a shorter request's tiles exit at once).
SIMILAR = [(0, 300), (50, 333), (1000, 257), (7, 320), (129, 1)]


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("dim", [64, 128, 256])
def test_rank_order_ragged(dtype, dim):
    page_size = {64: 1, 128: 16, 256: 64}[dim]
    batch = Batch(SIMILAR, page_size=page_size, h_kv=2, group=4, dim=dim, dtype=dtype,
                  block_tables=dim == 256, seed=dim)
    _check(batch, dtype, max_q_len=batch.max_q_len)


@gpu
def test_rank_order_grouped():
    # 8 query heads per KV head: 21 tiles per request, so the sm_90a warp-specialised kernel
    # launches its ranks in groups of 8 (hip/extend_ws.cuh rank_group); every tile is computed once.
    batch = Batch(SIMILAR, page_size=16, h_kv=2, group=8, dim=128, dtype=torch.bfloat16, seed=21)
    _check(batch, torch.bfloat16, max_q_len=batch.max_q_len)


# Long prefixes in rank order: every CTA sees 33-37 tiles of 64 keys (odd and even counts, the
# masked tiles at different offsets, the ring of stages wrapping several times).
LONG = [(2047, 64), (2100, 129), (1990, 96), (2200, 77)]
LONG_BOUND = max(p + e for p, e in LONG)  # its longest context


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_long_prefix_rank_order(dtype, page_size):
    batch = Batch(LONG, page_size=page_size, h_kv=2, group=4, dim=128, dtype=dtype, seed=page_size + 40)
    _check(batch, dtype, max_q_len=batch.max_q_len)
    # Contexts of more than 2048 keys, said so: the sm_90a kernel's pair steps (two tiles per
    # consumer step, a one-tile last step for odd counts).
    _check(batch, dtype, max_q_len=batch.max_q_len, max_kv_len=LONG_BOUND)


# Pair steps in a ragged batch: beside one long context, requests of 1 and 2 key tiles (no whole
# pair), 64 keys exactly, and a long prefix with 2 new tokens; and a batch whose longest context
# is the 2049 keys from which a bound picks the pair steps.
PAIR_RAGGED = [(3000, 70), (0, 1), (5, 60), (0, 64), (2047, 2), (63, 66)]
PAIR_AT_BOUND = [(1900, 149), (0, 33), (2048, 1), (100, 29)]


@gpu
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("specs", [PAIR_RAGGED, PAIR_AT_BOUND], ids=["ragged", "at_bound"])
def test_pair_steps_ragged(page_size, specs):
    batch = Batch(specs, page_size=page_size, h_kv=2, group=4, dim=128, dtype=torch.bfloat16,
                  seed=page_size + 70)
    _check(batch, torch.bfloat16, max_q_len=batch.max_q_len, max_kv_len=batch.max_kv_len)


# Short contexts, up to the 128 keys below which max_kv_len picks the kernel that fits two CTAs per
# SM with a 16-bit cache (on sm_90a at D = 128; elsewhere that kernel runs anyway): lengths 1, 17,
# 128 and page edges.
SHORT = [(0, 1), (16, 17), (0, 128), (100, 28), (127, 1), (0, 100), (63, 64), (15, 2)]
SHORT_BOUND = 128


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_short_context_kernel(dtype, page_size):
    batch = Batch(SHORT, page_size=page_size, h_kv=2, group=4, dim=128, dtype=dtype,
                  block_tables=page_size == 64, seed=page_size + 60)
    longest, max_q = batch.max_kv_len, batch.max_q_len
    assert longest == SHORT_BOUND
    radixkv.ops.take_kernel_log()  # clear the record
    _check(batch, dtype, max_q_len=max_q)  # no bound given: the device's kernel for any length
    default = radixkv.ops.take_kernel_log()
    assert default in ({"extend"}, {"extend_ws"}), default
    _check(batch, dtype, max_q_len=max_q, max_kv_len=longest)
    assert radixkv.ops.take_kernel_log() == {"extend"}
    _check(batch, dtype, max_q_len=max_q, max_kv_len=longest + 1)
    assert radixkv.ops.take_kernel_log() == default


@gpu
def test_max_kv_len_too_small_costs_no_accuracy():
    # A bound below the real lengths only picks the short-context kernel; the result stays exact.
    batch = Batch(MIXED, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16, seed=61)
    radixkv.ops.take_kernel_log()
    _check(batch, torch.bfloat16, max_kv_len=1, check=False)
    assert radixkv.ops.take_kernel_log() == {"extend"}
    with pytest.raises(radixkv.InvalidArgument, match=r"max_kv_len = 1 but kv_lens\[1\] = 10"):
        batch.run(max_kv_len=1, check=True)
    with pytest.raises(radixkv.InvalidArgument, match="max_kv_len must be >= 0"):
        batch.run(max_kv_len=-1)


# ----------------------------------------------------------------------------- extend plans


def _plan(batch: Batch, **kw) -> radixkv.ops.ExtendPlan:
    h_q, dim = batch.q.shape[1], batch.q.shape[2]
    h_kv = batch.k_cache.shape[2 if batch.layout == "bshd" else 1]
    return radixkv.ops.extend_plan([e for _, e in batch.specs], [p + e for p, e in batch.specs],
                                   h_q, h_kv, dim, **kw)


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("specs,bound", [(MIXED, None), (SHORT, SHORT_BOUND), (LONG, LONG_BOUND)],
                         ids=["mixed", "short", "long"])
def test_plan_order_is_exact(dtype, page_size, specs, bound):
    # The plan only reorders the CTAs: each tile is computed as without it, so the output is the
    # same bits (and within the reference's tolerance), with both kernels of sm_90a and the
    # warp-specialised one's pair steps, which a bound above 2048 keys picks (LONG runs in rank
    # order with or without the plan, so the same instance computes both).
    batch = Batch(specs, page_size=page_size, h_kv=2, group=4, dim=128, dtype=dtype,
                  block_tables=page_size == 64, seed=page_size + 80)
    plan = _plan(batch)
    assert plan.tiles.shape[0] > 0 and plan.tile_rows == radixkv.ops.extend_tile_rows(128)
    max_q = batch.max_q_len
    radixkv.ops.take_kernel_log()
    plain = batch.run(max_q_len=max_q, max_kv_len=bound).clone()
    kernels = radixkv.ops.take_kernel_log()
    _check(batch, dtype, max_q_len=max_q, max_kv_len=bound, plan=plan)
    assert radixkv.ops.take_kernel_log() == kernels
    assert torch.equal(batch.run(max_q_len=max_q, max_kv_len=bound, plan=plan), plain)


@gpu
@pytest.mark.parametrize("dim", [64, 256])
def test_plan_other_head_dims(dim):
    batch = Batch(MIXED, page_size=16, h_kv=2, group=4, dim=dim, dtype=torch.bfloat16,
                  block_tables=dim == 256, seed=dim + 81)
    _check(batch, torch.bfloat16, plan=_plan(batch))


@gpu
@pytest.mark.parametrize("spec,empty", [((100, 64), True), ((1000, 100), False), ((1000, 600), True)],
                         ids=["short", "long_few_tiles", "long_many_tiles"])
def test_plan_of_uniform_batch(spec, empty):
    # Empty where the kernels' rank order already is the plan's (short requests; 16+ tiles each).
    batch = Batch([spec] * 5, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16, seed=82)
    plan = _plan(batch)
    assert (plan.tiles.shape[0] == 0) == empty and plan.tiles.shape[1] == 2
    _check(batch, torch.bfloat16, max_q_len=spec[1], plan=plan)


@gpu
def test_plan_for_another_tile_height_is_ignored():
    batch = Batch(MIXED, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16, seed=83)
    rows = radixkv.ops.extend_tile_rows(128)
    other = _plan(batch, tile_rows=rows // 2)  # lists twice the tiles of half the height
    _check(batch, torch.bfloat16, plan=other)  # check=True verifies it covers its own tiles


@gpu
def test_bad_plan_is_recorded_or_rejected():
    batch = Batch(SMALL, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16, seed=84)
    plan = _plan(batch)
    tiles = plan.tiles.clone()
    ref = batch.run(plan=plan).clone()
    # An entry naming no request: skipped on the device and recorded; the other tiles exact.
    bad = tiles.clone()
    bad[0, 0] = len(SMALL) + 7
    with pytest.raises(radixkv.InvalidArgument, match="plan entry 0 .* names no query tile"):
        batch.run(plan=radixkv.ops.ExtendPlan(bad, plan.tile_rows), check=True)
    out = batch.run(plan=radixkv.ops.ExtendPlan(bad, plan.tile_rows), check=False)
    torch.cuda.synchronize()
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "plan")]
    skipped = int(tiles[0, 0])
    qo = batch.qo_indptr.tolist()
    for b in range(len(SMALL)):
        if b != skipped:
            assert torch.equal(out[qo[b]:qo[b + 1]], ref[qo[b]:qo[b + 1]]), f"request {b}"
    # A rank beyond its request's tiles: the same.
    bad = tiles.clone()
    bad[-1, 1] = 1000
    batch.run(plan=radixkv.ops.ExtendPlan(bad, plan.tile_rows), check=False)
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "plan")]
    # A tile left out (its entry dropped): rejected when checked, recorded when not.
    short = tiles[1:].contiguous()
    with pytest.raises(radixkv.InvalidArgument, match="every tile exactly once"):
        batch.run(plan=radixkv.ops.ExtendPlan(short, plan.tile_rows), check=True)
    batch.run(plan=radixkv.ops.ExtendPlan(short, plan.tile_rows), check=False)
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "plan")]
    # A tile listed twice in place of another: the count holds, so only the host check sees it.
    dup = tiles.clone()
    dup[1] = dup[0]
    with pytest.raises(radixkv.InvalidArgument, match="every tile exactly once"):
        batch.run(plan=radixkv.ops.ExtendPlan(dup, plan.tile_rows), check=True)
    # Wrong shapes and types never reach the kernel.
    with pytest.raises(radixkv.InvalidArgument, match="ExtendPlan"):
        batch.run(plan=tiles)
    with pytest.raises(radixkv.InvalidArgument, match=r"\[m, 2\]"):
        batch.run(plan=radixkv.ops.ExtendPlan(tiles.reshape(-1, 1).repeat(1, 3).contiguous(), plan.tile_rows))
    with pytest.raises(radixkv.InvalidArgument, match="int32"):
        batch.run(plan=radixkv.ops.ExtendPlan(tiles.long(), plan.tile_rows))
    with pytest.raises(radixkv.InvalidArgument, match="tile_rows must be >= 1"):
        batch.run(plan=radixkv.ops.ExtendPlan(tiles, 0))
    assert torch.equal(batch.run(plan=plan), ref), "a good plan after bad ones"
    assert radixkv.ops.take_errors() == []


# Many more query tiles than SMs: sm_90a's persistent CTAs (max_kv_len unknown, rank order) each run
# several slots, among them NaN tiles (more queries than keys) and, with a bad plan, skipped ones,
# so the slots a CTA's consumers take from its producer mix every kind, in every order.
MANY = [(p, e) for p in (0, 5, 100, 700) for e in (1, 17, 64, 100, 200, 333)] * 2


@gpu
def test_persistent_ctas_mix_tiles_nan_tiles_and_skipped_slots():
    batch = Batch(MANY, page_size=16, h_kv=8, group=4, dim=128, dtype=torch.bfloat16, seed=48)
    plan = _plan(batch)
    n_slots = plan.tiles.shape[0] * 8
    assert n_slots > 4 * torch.cuda.get_device_properties(0).multi_processor_count
    good = batch.run(plan=plan).clone()
    ref = batch.reference()
    qo = batch.qo_indptr.tolist()
    assert_close(good, ref, torch.bfloat16, qo)
    # Every fifth request with fewer keys than queries: its rows NaN, every other request's exact.
    nan_reqs = [b for b in range(len(MANY)) if b % 5 == 2]
    for b in nan_reqs:
        batch.kv_lens[b] = MANY[b][1] - 1
    out = batch.run(plan=plan, check=False)
    torch.cuda.synchronize()
    fault = radixkv.ops.KernelFault("extend_attention", "queries_exceed_keys")
    assert radixkv.ops.take_errors() == [fault]
    for b in range(len(MANY)):
        rows = out[qo[b]:qo[b + 1]]
        if b in nan_reqs:
            assert torch.isnan(rows).all(), f"request {b}"
        else:
            assert torch.equal(rows, good[qo[b]:qo[b + 1]]), f"request {b}"
    for b in nan_reqs:
        batch.kv_lens[b] = sum(MANY[b])
    # Every seventh plan entry naming no request: those tiles skipped (their rows keep the poison),
    # every other tile exact.
    bad = plan.tiles.clone()
    skipped = bad[::7].clone()
    bad[::7, 0] = len(MANY) + 3
    out = torch.full_like(batch.q, float("nan"))
    batch.run(out=out, plan=radixkv.ops.ExtendPlan(bad, plan.tile_rows), check=False)
    torch.cuda.synchronize()
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "plan")]
    rows = radixkv.ops.extend_tile_rows(128)
    kept = torch.ones(out.shape[0], out.shape[1], dtype=torch.bool, device=out.device)
    for req, rank in skipped.tolist():  # tile `rank` from the end of request req: its rows x heads
        n_tiles = _ceil((qo[req + 1] - qo[req]) * 4, rows)
        first = (n_tiles - 1 - rank) * rows
        for r in range(first, min(first + rows, (qo[req + 1] - qo[req]) * 4)):
            # Packed row r: position r // 4, head r % 4 of every KV head's group.
            kept[qo[req] + r // 4, r % 4::4] = False
    assert torch.isnan(out[~kept]).all()
    assert torch.equal(out[kept], good[kept])


@gpu
def test_custom_scale_and_single_request():
    batch = Batch([(4095, 2048)], page_size=16, h_kv=1, group=8, dim=128, dtype=torch.float16, seed=7)
    _check(batch, torch.float16, sm_scale=0.05)


@gpu
def test_deterministic():
    batch = Batch(MIXED, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16, seed=3)
    a = batch.run().clone()
    b = batch.run()
    assert torch.equal(a, b), "two runs on the same inputs differ (a race?)"


@gpu
@pytest.mark.parametrize("dim,planned", [(64, False), (128, False), (128, True)],
                         ids=["d64", "d128", "d128_plan"])
def test_more_queries_than_keys(dim, planned):
    # dim 128 runs sm_90a's warp-specialised kernel there (no max_kv_len given), in request order,
    # or with a plan in rank order; either way the NaN tiles are written, and with the plan the
    # other requests are also checked against the reference.
    batch = Batch(SMALL, page_size=16, h_kv=2, group=2, dim=dim, dtype=torch.bfloat16, seed=5)
    plan = _plan(batch) if planned else None  # of the valid lengths: the same query tiles
    batch.kv_lens[2] = 10  # request 2 has 64 queries
    with pytest.raises(radixkv.InvalidArgument, match="request 2 has more queries than keys"):
        extend_attention(batch.q, batch.k_cache, batch.v_cache, batch.qo_indptr, batch.kv_indptr,
                         batch.kv_indices, batch.kv_lens, check=True)
    # Unchecked, the kernel marks that request's rows NaN instead of returning garbage.
    out = extend_attention(batch.q, batch.k_cache, batch.v_cache, batch.qo_indptr, batch.kv_indptr,
                           batch.kv_indices, batch.kv_lens, check=False, plan=plan)
    q0, q1 = int(batch.qo_indptr[2]), int(batch.qo_indptr[3])
    assert torch.isnan(out[q0:q1]).all()
    assert torch.isfinite(out[:q0]).all() and torch.isfinite(out[q1:]).all()
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "queries_exceed_keys")]
    if planned:  # the other requests within tolerance of the reference
        batch.kv_lens[2] = SMALL[2][0] + SMALL[2][1]
        ref = batch.reference()
        bounds = batch.qo_indptr.tolist()
        for b in range(len(SMALL)):
            if b != 2:
                assert_close(out[bounds[b]:bounds[b + 1]], ref[bounds[b]:bounds[b + 1]], torch.bfloat16,
                             what=f"request {b}")


@gpu
@pytest.mark.parametrize("tables", [False, True], ids=["csr", "block_tables"])
def test_page_outside_pool_d128(tables):
    # head_dim 128 runs sm_90a's warp-specialised kernel there (hip/extend_ws.cuh): its page
    # gather must zero-fill the bad row, record the fault and leave the other requests exact.
    batch = Batch(SMALL, page_size=16, h_kv=2, group=4, dim=128, dtype=torch.bfloat16,
                  block_tables=tables, seed=13)
    ref = batch.reference()  # of the good metadata
    num_pages = batch.k_cache.shape[0]
    if tables:
        batch.block_tables[3, 2] = num_pages + 3
    else:
        batch.kv_indices[int(batch.kv_indptr[3]) + 2] = num_pages + 3
    out = torch.full_like(batch.q, float("nan"))
    batch.run(out=out, check=False)
    torch.cuda.synchronize()
    assert radixkv.ops.take_errors() == [radixkv.ops.KernelFault("extend_attention", "page_range")]
    assert torch.isfinite(out).all(), "the bad page's rows must be zero-filled, not read"
    qo = batch.qo_indptr.tolist()
    for b in range(len(SMALL)):
        if b != 3:
            assert_close(out[qo[b]:qo[b + 1]], ref[qo[b]:qo[b + 1]], torch.bfloat16, what=f"request {b}")


@gpu
@pytest.mark.parametrize("planned", [False, True], ids=["no_plan", "plan"])
def test_cuda_graph_replay(planned):
    batch = Batch(SMALL, page_size=1 if not planned else 16, h_kv=2, group=4, dim=128,
                  dtype=torch.bfloat16, seed=11 if not planned else 85)
    # A plan's length sizes the grid at capture; its contents are read at every replay.
    kw = {"plan": _plan(batch)} if planned else {}
    out = torch.empty_like(batch.q)
    batch.run(out=out, **kw)  # warm up (build, lazy init) outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        batch.run(out=out, max_q_len=2048, check=False, **kw)
    if planned:
        kw["plan"].tiles.copy_(kw["plan"].tiles.flip(0))  # another order of the same tiles
    # New values in the same buffers: the replay must read them.
    batch.q.copy_(torch.randn_like(batch.q, dtype=torch.float32).to(batch.q.dtype))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    assert_close(out, batch.reference(), torch.bfloat16, batch.qo_indptr.tolist())
    assert radixkv.ops.take_errors() == []


@gpu
def test_unsupported_head_dim_and_dtype():
    batch = Batch([(3, 5)], page_size=16, h_kv=1, group=1, dim=96, dtype=torch.bfloat16)
    with pytest.raises(radixkv.InvalidArgument, match="head_dim: 96"):
        batch.run()
    b32 = Batch([(3, 5)], page_size=16, h_kv=1, group=1, dim=64, dtype=torch.float32)
    with pytest.raises(radixkv.InvalidArgument, match="float32"):
        b32.run()


@gpu
def test_opcheck():
    batch = Batch([(5, 7), (0, 33), (40, 1)], page_size=16, h_kv=2, group=2, dim=64,
                  dtype=torch.bfloat16, seed=2)
    out = torch.empty_like(batch.q)
    args = (batch.q, batch.k_cache.nan_to_num(), batch.v_cache.nan_to_num(), batch.qo_indptr,
            batch.kv_indptr, batch.kv_indices, batch.kv_lens, out, 0.125, 0, batch.q.shape[0],
            torch.zeros(2, dtype=torch.int32, device="cuda"))
    torch.library.opcheck(torch.ops.radixkv.extend_attention.default, args)
    torch.library.opcheck(torch.ops.radixkv.extend_attention.default, args + (None, None, 64))
    plan = _plan(batch, tile_rows=radixkv.ops.extend_tile_rows(64))
    torch.library.opcheck(torch.ops.radixkv.extend_attention.default,
                          args + (None, None, 64, plan.tiles, plan.tile_rows))


# ----------------------------------------------------------------------------- CPU: metadata


def test_check_metadata_names_the_request():
    qo = torch.tensor([0, 2, 5, 6], dtype=torch.int32)
    check_extend_metadata(qo, torch.tensor([6, 3, 6], dtype=torch.int32), 6)  # the contract's golden case
    with pytest.raises(radixkv.InvalidArgument, match="request 1 has more queries than keys"):
        check_extend_metadata(qo, torch.tensor([6, 2, 6], dtype=torch.int32), 6)
    with pytest.raises(radixkv.InvalidArgument, match="ends at 6 but q has 7"):
        check_extend_metadata(qo, torch.tensor([6, 3, 6], dtype=torch.int32), 7)
    with pytest.raises(radixkv.InvalidArgument, match="decreases at request 1"):
        check_extend_metadata(torch.tensor([0, 3, 2], dtype=torch.int32),
                              torch.tensor([5, 5], dtype=torch.int32), 2)
    lens = torch.tensor([6, 3, 6], dtype=torch.int32)
    check_extend_metadata(qo, lens, 6, max_q_len=3, max_kv_len=6)
    with pytest.raises(radixkv.InvalidArgument, match=r"max_kv_len = 5 but kv_lens\[0\] = 6"):
        check_extend_metadata(qo, lens, 6, max_kv_len=5)
    with pytest.raises(radixkv.InvalidArgument, match="max_q_len = 2 but a request has L_q = 3"):
        check_extend_metadata(qo, lens, 6, max_q_len=2)


def test_bad_bounds_rejected_before_any_work(monkeypatch):
    # The reference ops on the CPU; the bounds are checked before anything else, as on a GPU.
    monkeypatch.setenv("RADIXKV_OPS_BACKEND", "reference")
    q = torch.randn(3, 2, 64)
    cache = torch.randn(4, 16, 1, 64)
    i32 = dict(dtype=torch.int32)
    args = (q, cache, cache, torch.tensor([0, 3], **i32), torch.tensor([0, 1], **i32),
            torch.tensor([2], **i32), torch.tensor([5], **i32))
    for kw, what in (({"max_kv_len": -1}, "max_kv_len must be >= 0"),
                     ({"max_q_len": -2}, "max_q_len must be >= 0")):
        with pytest.raises(radixkv.InvalidArgument, match=what):
            extend_attention(*args, **kw)
    good = extend_attention(*args, max_q_len=3, max_kv_len=5, check=True)
    assert torch.allclose(good, extend_attention(*args, check=True))


def test_flops_formula():
    # one request, E = 2, P = 4: 2 queries see 5 and 6 keys = 11 pairs = E*P + E(E+1)/2
    assert extend_flops([2], [4], heads_q=1, head_dim=1) == 4 * 11
    assert math.isclose(extend_flops([128] * 8, [0] * 8, 32, 128), 8 * 4 * 128 * 64.5 * 128 * 32)


def test_plan_checked_on_the_host(monkeypatch):
    # CPU, reference ops: the plan's type, shape and coverage are checked as on a GPU (the
    # reference computes every tile in its own order, so a good plan changes nothing).
    monkeypatch.setenv("RADIXKV_OPS_BACKEND", "reference")
    specs = [(3, 5), (0, 9), (40, 1)]
    g = torch.Generator().manual_seed(86)
    q = torch.randn(15, 4, 64, generator=g)
    cache = torch.randn(8, 16, 2, 64, generator=g)
    i32 = dict(dtype=torch.int32)
    args = (q, cache, cache, torch.tensor([0, 5, 14, 15], **i32), torch.tensor([0, 1, 2, 5], **i32),
            torch.tensor([4, 1, 2, 6, 7], **i32), torch.tensor([p + e for p, e in specs], **i32))
    plan = radixkv.ops.extend_plan([e for _, e in specs], [p + e for p, e in specs], 4, 2, 64,
                                   tile_rows=4, device=torch.device("cpu"))
    # tiles of 4 rows, group 2: requests have 3, 5 and 1 tiles
    assert sorted(map(tuple, plan.tiles.tolist())) == [(0, r) for r in range(3)] + [(1, r) for r in range(5)] + [(2, 0)]
    base = extend_attention(*args, check=True)
    assert torch.equal(extend_attention(*args, check=True, plan=plan), base)
    with pytest.raises(radixkv.InvalidArgument, match="every tile exactly once"):
        extend_attention(*args, check=True, plan=radixkv.ops.ExtendPlan(plan.tiles[1:].contiguous(), 4))
    with pytest.raises(radixkv.InvalidArgument, match=r"plan entry 2 = \(3, 0\) names no query tile"):
        bad = plan.tiles.clone()
        bad[2] = torch.tensor([3, 0])
        extend_attention(*args, check=True, plan=radixkv.ops.ExtendPlan(bad, 4))
    with pytest.raises(radixkv.InvalidArgument, match="ExtendPlan"):
        extend_attention(*args, plan=(plan.tiles, 4))
    if not GPU:  # no kernels to ask: a clear error, and tile_rows= builds the plan anyway
        with pytest.raises(radixkv.InvalidArgument, match="extend kernels are not available"):
            radixkv.ops.extend_tile_rows(64)
    with pytest.raises(radixkv.InvalidArgument, match="multiple of num_kv_heads"):
        radixkv.ops.extend_plan([1], [1], 3, 2, 64, tile_rows=4, device=torch.device("cpu"))
    with pytest.raises(radixkv.InvalidArgument, match="more queries than|queries but only"):
        radixkv.ops.extend_plan([5], [4], 4, 2, 64, tile_rows=4, device=torch.device("cpu"))
