"""The decode work plan (radixkv-core metadata/plan.rs) through the Python API, and the pure-torch
decode run through a plan the way the kernels run it (CPU, no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import radixkv  # noqa: E402
from radixkv import _core, ops  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402


def _ragged(seed, batch, lo, hi):
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(lo), np.log(hi), batch)).astype(np.int64).tolist()


def _rows(plan, batch):
    cap = (len(plan) - batch) // 4
    return np.asarray(plan[: 4 * cap]).reshape(cap, 4), np.asarray(plan[4 * cap:])


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("seed,batch,lo,hi", [(1, 8, 256, 32768), (2, 32, 16, 65536), (3, 64, 1, 4096)])
def test_plan_covers_every_position_once(page_size, seed, batch, lo, hi):
    lens = _ragged(seed, batch, lo, hi)
    slots = 132
    cap = _core.decode_plan_capacity(batch, slots)
    plan, units, chunk = _core.build_decode_plan(lens, page_size, slots=slots, capacity=cap)
    assert plan.dtype == np.int32 and len(plan) == 4 * cap + batch
    rows, first = _rows(plan, batch)
    assert units <= cap and (rows[units:] == [-1, 0, 0, 0]).all()
    for b, n in enumerate(lens):
        cnt = rows[first[b], 3]
        seg = rows[first[b]: first[b] + cnt]
        assert (seg[:, 0] == b).all() and (seg[:, 3] == cnt).all()
        assert seg[0, 1] == 0 and seg[-1, 2] == n
        assert (seg[1:, 1] == seg[:-1, 2]).all(), "units of a request must tile it"
        assert (seg[:, 1] % page_size == 0).all()
        assert (seg[:, 2] - seg[:, 1] <= chunk).all()


def test_plan_balances_ragged_batch():
    lens = _ragged(1, 8, 256, 32768)
    plan, units, chunk = _core.build_decode_plan(lens, 16, slots=132)
    rows, _ = _rows(plan, 8)
    sizes = rows[:units, 2] - rows[:units, 1]
    # The longest unit is the chunk, and one wave of slots holds every unit.
    assert sizes.max() == chunk and units <= 132 * 2
    # No request waits on another's unit much longer than the chunk: the total work spread over
    # the units used is within 2x of the chunk (the rest is the short requests' single units).
    assert sum(lens) / units <= chunk <= 2 * max(sum(lens) / 132, 128) + 16


def _pool(lens, page_size, h_kv, dim, seed, layout="bshd", dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // page_size) for n in lens]
    num_pages = sum(need) + 3
    shape = ((num_pages, page_size, h_kv, dim) if layout == "bshd"
             else (num_pages, h_kv, page_size, dim))
    kc = torch.randn(shape, generator=gen).to(dtype)
    vc = torch.randn(shape, generator=gen).to(dtype)
    perm = torch.randperm(num_pages, generator=gen)[: sum(need)].to(torch.int32)
    indptr = torch.tensor([0] + np.cumsum(need).tolist(), dtype=torch.int32)
    return kc, vc, indptr, perm, torch.tensor(lens, dtype=torch.int32)


@pytest.mark.parametrize("page_size,layout", [(1, "bshd"), (16, "bshd"), (16, "bhsd")])
@pytest.mark.parametrize("how", ["balanced", "fixed", "padded"])
def test_reference_through_plan_matches_direct(page_size, layout, how):
    lens = [0, 3, 700, 2000, 129, 1]
    h_q, h_kv, dim = 8, 2, 16
    kc, vc, indptr, indices, kv_lens = _pool(lens, page_size, h_kv, dim, 7, layout)
    q = torch.randn(len(lens), h_q, dim, generator=torch.Generator().manual_seed(3))
    if how == "balanced":
        plan = ops.decode_plan(lens, page_size, slots=24)
    elif how == "fixed":
        plan = ops.decode_plan(kv_lens, page_size, num_splits=5)
    else:
        plan = ops.decode_plan(lens, page_size, slots=24,
                               capacity=_core.decode_plan_capacity(len(lens), 24))
    rows, _ = _rows(plan.numpy(), len(lens))
    assert (rows[:, 3] > 1).any(), "the case must exercise the merge"
    want = R.paged_decode(q, kc, vc, indptr, indices, kv_lens, 0.3, layout=layout)
    got = R.paged_decode(q, kc, vc, indptr, indices, kv_lens, 0.3, layout=layout, plan=plan)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    # The public op on the CPU backend runs the same planned reference.
    via_op = ops.paged_decode(q, kc, vc, indptr, indices, kv_lens, 0.3, layout=layout, plan=plan)
    torch.testing.assert_close(via_op, want, atol=2e-5, rtol=2e-5)
    assert ops.take_errors(torch.device("cpu")) == []


def test_plan_that_misses_keys_changes_the_result():
    # A plan is what the kernels obey: dropping a unit drops its keys (so the test above can fail).
    lens = [600]
    kc, vc, indptr, indices, kv_lens = _pool(lens, 16, 1, 8, 1)
    q = torch.randn(1, 1, 8)
    plan = ops.decode_plan(lens, 16, num_splits=3).clone()
    plan[0:4] = torch.tensor([-1, 0, 0, 0], dtype=torch.int32)  # unit 0 unused
    full = R.paged_decode(q, kc, vc, indptr, indices, kv_lens)
    part = R.paged_decode(q, kc, vc, indptr, indices, kv_lens, plan=plan)
    assert not torch.allclose(full, part)


def test_bad_plan_rows_are_recorded_not_fatal():
    lens = [40, 50]
    kc, vc, indptr, indices, kv_lens = _pool(lens, 16, 1, 8, 2)
    q = torch.randn(2, 1, 8)
    ops.take_errors(torch.device("cpu"))
    plan = ops.decode_plan(lens, 16, slots=4).clone()
    plan[0] = 7  # a request outside the batch
    out = ops.paged_decode(q, kc, vc, indptr, indices, kv_lens, plan=plan)
    assert torch.isfinite(out).all()
    faults = ops.take_errors(torch.device("cpu"))
    assert [(f.op, f.check) for f in faults] == [("paged_decode", "plan")]
    assert "decode plan" in str(faults[0])


def test_plan_argument_checks():
    lens = [40, 50]
    kc, vc, indptr, indices, kv_lens = _pool(lens, 16, 1, 8, 2)
    q = torch.randn(2, 1, 8)
    with pytest.raises(radixkv.InvalidArgument, match="plan must be int32"):
        ops.paged_decode(q, kc, vc, indptr, indices, kv_lens, plan=torch.zeros(5, dtype=torch.int32))
    with pytest.raises(radixkv.InvalidArgument, match="not both"):
        ops.paged_decode(q, kc, vc, indptr, indices, kv_lens,
                         plan=ops.decode_plan(lens, 16, slots=4), num_splits=2)
    with pytest.raises(radixkv.InvalidArgument, match="capacity"):
        _core.build_decode_plan([4096] * 4, 16, slots=132, capacity=2)
    with pytest.raises(radixkv.InvalidArgument, match="exactly one"):
        _core.build_decode_plan([1], 16)
    with pytest.raises(radixkv.InvalidArgument, match="negative"):
        _core.build_decode_plan([-1], 16, slots=4)
    # The op's planner treats a negative length as empty (the kernels record that fault).
    rows, _ = _rows(ops.decode_plan([-5, 40], 16, slots=4).numpy(), 2)
    assert rows[0].tolist() == [0, 0, 0, 1]


@pytest.mark.parametrize("builder", ["csr", "table"])
def test_metadata_carries_the_plan_in_its_one_buffer(builder):
    pages = [list(range(0, 64)), [64, 65]]
    lens = [1024, 20]
    cap = _core.decode_plan_capacity(2, 50)
    if builder == "csr":
        m = radixkv.build_decode_metadata(pages, lens, 16, plan_slots=50, plan_capacity=cap)
    else:
        m = radixkv.build_block_table_metadata(pages, lens, 16, plan_slots=50, plan_capacity=cap)
    want, units, chunk = _core.build_decode_plan(lens, 16, slots=50, capacity=cap)
    np.testing.assert_array_equal(m.decode_plan, want)
    assert m.scalars["plan_capacity"] == cap and m.scalars["plan_units"] == units
    assert np.shares_memory(m.decode_plan, m.buffer)
    assert (m.decode_plan.ctypes.data - m.buffer.ctypes.data) % 64 == 0  # field alignment
    plain = radixkv.build_decode_metadata(pages, lens, 16)
    assert plain.decode_plan is None
    with pytest.raises(radixkv.InvalidArgument, match="plan_slots"):
        radixkv.build_decode_metadata(pages, lens, 16, plan_capacity=cap)
