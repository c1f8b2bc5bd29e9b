"""Bad kernel inputs: no crash, good requests unaffected, the right fault recorded, checked mode raises.

Each case corrupts one piece of metadata of an otherwise good call (a page index out of range or
negative, a decreasing or overlong ``kv_indptr``, lengths beyond the pages or negative,
``qo_indptr`` past q or decreasing, more queries than keys, out-of-range ``store_kv`` slots and
``copy_blocks`` pages), in CSR and block-table form, on the matrix-unit and CUDA-core decode
kernels, with and without split partitions. In the default mode the op must return, the outputs of
the requests the corruption does not touch must match the reference of the uncorrupted call
(judged per request, tests/_kernel_checks.py), and ``radixkv.ops.take_errors()`` must return
exactly the expected faults. With ``RADIXKV_OPS_CHECK=1`` the same call must raise
:class:`radixkv.InvalidArgument`. ``sm_scale`` must be finite and positive in every mode.

Every case runs on the CPU (the reference ops, which clamp, skip and record like the kernels) and,
marked ``gpu``, on a GPU with the compiled kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

import radixkv
from radixkv import ops
from radixkv.ops import reference as R
from _kernel_checks import ScatteredPages, assert_close

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason="needs a GPU")]),
]
DT = torch.bfloat16
PAGE, H_KV, GROUP, DIM = 16, 2, 4, 64


@pytest.fixture(autouse=True)
def _backend(request, monkeypatch):
    dev = request.node.callspec.params.get("device", "cpu") if hasattr(request.node, "callspec") else "cpu"
    if dev == "cuda":
        from radixkv.ops import loader

        loader.load()
    monkeypatch.setenv("RADIXKV_OPS_BACKEND", "extension" if dev == "cuda" else "reference")
    monkeypatch.delenv("RADIXKV_OPS_CHECK", raising=False)
    ops.take_errors(torch.device(dev))
    yield


class Pool(ScatteredPages):
    """Requests of ``lens`` tokens on scattered pages of a pool whose other slots are NaN."""

    def __init__(self, lens, device, seed=0, spare=6):
        g = torch.Generator().manual_seed(seed)
        super().__init__(lens, PAGE, g, spare, device)
        shape = (self.num_pages, PAGE, H_KV, DIM)
        self.k = torch.full(shape, float("nan"), dtype=DT, device=device)
        self.v = torch.full(shape, float("nan"), dtype=DT, device=device)
        for b, n in enumerate(lens):
            pos = torch.arange(n)
            pg = torch.tensor(self.pages[b], dtype=torch.int64)[pos // PAGE] if n else pos
            self.k[pg.to(device), (pos % PAGE).to(device)] = torch.randn(n, H_KV, DIM, generator=g).to(device, DT)
            self.v[pg.to(device), (pos % PAGE).to(device)] = torch.randn(n, H_KV, DIM, generator=g).to(device, DT)


# ----------------------------------------------------------------------------- decode / extend

LENS = [37, 300, 5, 90]


@dataclass
class Case:
    name: str
    op: str                      # "decode" or "extend"
    corrupt: Callable[[dict, Pool], None]  # edits the metadata dict in place
    faults: set = field(default_factory=set)  # expected (op, check) names
    touched: tuple = ()          # requests whose outputs the corruption may change
    tables: bool = False
    kwargs: dict = field(default_factory=dict)


def _set(name, idx, value):
    def f(m, pool):
        t = m[name].clone()
        if callable(value):
            t[idx] = value(pool, t)
        else:
            t[idx] = value
        m[name] = t
    return f


def _set_page(b, j, value):
    def f(m, pool):
        t = m["kv_indices"].clone()
        t[int(m["kv_indptr"][b]) + j] = value(pool) if callable(value) else value
        m["kv_indices"] = t
    return f


D_OP, E_OP = "paged_decode", "extend_attention"
CASES = [
    # decode, CSR
    Case("decode_page_past_pool", "decode", _set_page(1, 3, lambda p: p.num_pages + 5),
         {(D_OP, "page_range")}, (1,)),
    Case("decode_page_negative", "decode", _set_page(1, 0, -7), {(D_OP, "page_range")}, (1,)),
    Case("decode_page_past_pool_split", "decode", _set_page(1, 2, lambda p: p.num_pages),
         {(D_OP, "page_range")}, (1,), kwargs={"num_splits": 7}),
    Case("decode_indptr_decreasing", "decode", _set("kv_indptr", 2, lambda p, t: int(t[1]) - 1),
         {(D_OP, "indptr_order"), (D_OP, "len_beyond_pages")}, (1, 2)),
    Case("decode_indptr_past_indices", "decode", _set("kv_indptr", 4, lambda p, t: int(t[4]) + 9),
         {(D_OP, "indptr_overrun")}, (3,)),
    Case("decode_len_beyond_pages", "decode", _set("kv_lens", 0, 37 + 40),
         {(D_OP, "len_beyond_pages")}, (0,)),
    Case("decode_len_negative", "decode", _set("kv_lens", 2, -3), {(D_OP, "len_negative")}, (2,)),
    # decode, block tables
    Case("decode_table_page_past_pool", "decode", _set("block_tables", (3, 1), 1 << 20),
         {(D_OP, "page_range")}, (3,), tables=True),
    Case("decode_table_page_negative", "decode", _set("block_tables", (1, 5), -1),
         {(D_OP, "page_range")}, (1,), tables=True),
    Case("decode_table_len_beyond_cols", "decode", _set("kv_lens", 1, 10_000),
         {(D_OP, "len_beyond_pages")}, (1,), tables=True),
    # decode, the CUDA-core kernel (gfx906 class) forced
    Case("cuda_core_page_past_pool", "decode", _set_page(1, 3, lambda p: p.num_pages + 1),
         {(D_OP, "page_range")}, (1,), kwargs={"kernel": "cuda_core", "num_splits": 3}),
    Case("cuda_core_indptr_past_indices", "decode", _set("kv_indptr", 4, lambda p, t: int(t[4]) + 100),
         {(D_OP, "indptr_overrun")}, (3,), kwargs={"kernel": "cuda_core"}),
    Case("cuda_core_len_negative", "decode", _set("kv_lens", 0, -1), {(D_OP, "len_negative")}, (0,),
         kwargs={"kernel": "cuda_core"}),
    # extend, CSR
    Case("extend_page_past_pool", "extend", _set_page(1, 2, lambda p: p.num_pages + 3),
         {(E_OP, "page_range")}, (1,)),
    Case("extend_page_negative", "extend", _set_page(3, 0, -2), {(E_OP, "page_range")}, (3,)),
    Case("extend_indptr_decreasing", "extend", _set("kv_indptr", 2, lambda p, t: int(t[1]) - 1),
         {(E_OP, "indptr_order"), (E_OP, "len_beyond_pages"), (E_OP, "queries_exceed_keys")}, (1, 2)),
    Case("extend_indptr_past_indices", "extend", _set("kv_indptr", 4, lambda p, t: int(t[4]) + 9),
         {(E_OP, "indptr_overrun")}, (3,)),
    Case("extend_len_beyond_pages", "extend", _set("kv_lens", 2, 5 + 64),
         {(E_OP, "len_beyond_pages")}, (2,)),
    Case("extend_len_negative", "extend", _set("kv_lens", 1, -4), {(E_OP, "len_negative")}, (1,)),
    Case("extend_qo_past_q", "extend", _set("qo_indptr", 4, lambda p, t: int(t[4]) + 3),
         {(E_OP, "qo_indptr")}, (3,)),
    # request 2 gets L_q = -1 (skipped); request 3 then starts one row early, over request 1's last
    Case("extend_qo_decreasing", "extend", _set("qo_indptr", 3, lambda p, t: int(t[2]) - 1),
         {(E_OP, "qo_indptr")}, (1, 2, 3)),
    Case("extend_queries_exceed_keys", "extend", _set("kv_lens", 0, 3),
         {(E_OP, "queries_exceed_keys")}, (0,)),
    # extend, block tables
    Case("extend_table_page_past_pool", "extend", _set("block_tables", (1, 4), 1 << 20),
         {(E_OP, "page_range")}, (1,), tables=True),
]
# Queries per request in the extend cases (the last E of each request's tokens).
EXT_Q = [5, 64, 5, 9]


def _metadata(pool, case):
    m = {"kv_lens": pool.kv_lens()}
    if case.tables:
        m["block_tables"] = pool.block_table(pad=2)
    else:
        m["kv_indptr"], m["kv_indices"] = pool.csr()
    if case.op == "extend":
        qo = [0]
        for e in EXT_Q:
            qo.append(qo[-1] + e)
        m["qo_indptr"] = torch.tensor(qo, dtype=torch.int32, device=pool.device)
    return m


def _call(case, q, pool, m, **kw):
    if case.op == "decode":
        return ops.paged_decode(q, pool.k, pool.v, m.get("kv_indptr"), m.get("kv_indices"), m["kv_lens"],
                                block_tables=m.get("block_tables"), **case.kwargs, **kw)
    return ops.extend_attention(q, pool.k, pool.v, m["qo_indptr"], m.get("kv_indptr"), m.get("kv_indices"),
                                m["kv_lens"], block_tables=m.get("block_tables"), **case.kwargs, **kw)


def _rows(case, m):
    """Output rows of each request: one per request (decode) or its qo_indptr range (extend)."""
    if case.op == "decode":
        return [(b, b + 1) for b in range(len(LENS))]
    qo = m["qo_indptr"].tolist()
    return [(qo[b], qo[b + 1]) for b in range(len(LENS))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_metadata_is_clamped_and_recorded(case, device, monkeypatch):
    pool = Pool(LENS, device, seed=len(case.name))
    rows = len(LENS) if case.op == "decode" else sum(EXT_Q)
    q = torch.randn(rows, H_KV * GROUP, DIM, generator=torch.Generator().manual_seed(1)).to(device, DT)
    good = _metadata(pool, case)
    want = _call(case, q, pool, good)
    assert ops.take_errors(torch.device(device)) == []
    bad = dict(good)
    case.corrupt(bad, pool)
    out = _call(case, q, pool, bad)  # no crash, no exception
    got = {(f.op, f.check) for f in ops.take_errors(torch.device(device))}
    assert got == case.faults, f"recorded {got}, expected {case.faults}"
    for b, (r0, r1) in enumerate(_rows(case, good)):
        if b in case.touched:
            continue
        assert_close(out[r0:r1], want[r0:r1], DT, what=f"{case.name}: untouched request {b}")
    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    with pytest.raises(radixkv.InvalidArgument):
        _call(case, q, pool, bad)
    ops.take_errors(torch.device(device))


# ----------------------------------------------------------------------------- store_kv, copy_blocks


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_slot_past_pool(device, monkeypatch):
    kc = torch.zeros(8, PAGE, H_KV, DIM, dtype=DT, device=device)
    vc = torch.zeros_like(kc)
    k = torch.randn(4, H_KV, DIM).to(device, DT)
    slots = torch.tensor([3, 8 * PAGE + 2, -1, 100], dtype=torch.int32, device=device)
    ops.store_kv(kc, vc, k, k, slots)
    assert ops.take_errors(torch.device(device)) == [ops.KernelFault("store_kv", "slot_range")]
    flat = kc.view(-1, H_KV, DIM)
    assert torch.equal(flat[3], k[0]) and torch.equal(flat[100], k[3])  # the good tokens landed
    assert int((flat != 0).any(dim=(1, 2)).sum()) == 2  # nothing else was written
    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    with pytest.raises(radixkv.InvalidArgument, match="slot"):
        ops.store_kv(kc, vc, k, k, slots)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pair", [(40, 2), (1, -3), (-1, 5), (2, 9999)], ids=["src_past", "dst_neg",
                                                                               "src_neg", "dst_past"])
def test_copy_blocks_page_out_of_range(device, pair, monkeypatch):
    kc = torch.randn(16, PAGE, H_KV, DIM).to(device, DT)
    vc = torch.randn_like(kc)
    before_k, before_v = kc.clone(), vc.clone()
    pairs = torch.tensor([[0, 7], list(pair), [3, 11]], dtype=torch.int32, device=device)
    ops.copy_blocks(kc, vc, pairs)
    assert ops.take_errors(torch.device(device)) == [ops.KernelFault("copy_blocks", "page_range")]
    want_k, want_v = before_k.clone(), before_v.clone()
    want_k[7], want_k[11] = before_k[0], before_k[3]
    want_v[7], want_v[11] = before_v[0], before_v[3]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)  # the good pairs, nothing else
    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    with pytest.raises(radixkv.InvalidArgument, match="out of range"):
        ops.copy_blocks(kc, vc, pairs)


# ----------------------------------------------------------------------------- sm_scale


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [math.nan, math.inf, 0.0, -0.125])
def test_sm_scale_must_be_finite_and_positive(device, scale):
    pool = Pool([20, 3], device)
    ind, idx = pool.csr()
    q = torch.randn(2, H_KV * GROUP, DIM).to(device, DT)
    with pytest.raises(radixkv.InvalidArgument, match="sm_scale"):
        ops.paged_decode(q, pool.k, pool.v, ind, idx, pool.kv_lens(), scale)
    qo = torch.tensor([0, 1, 2], dtype=torch.int32, device=device)
    with pytest.raises(radixkv.InvalidArgument, match="sm_scale"):
        ops.extend_attention(q, pool.k, pool.v, qo, ind, idx, pool.kv_lens(), scale)


@pytest.mark.parametrize("device", DEVICES)
def test_unknown_kernel_choice_is_rejected(device):
    pool = Pool([20], device)
    ind, idx = pool.csr()
    q = torch.randn(1, H_KV * GROUP, DIM).to(device, DT)
    with pytest.raises(radixkv.InvalidArgument, match="kernel"):
        ops.paged_decode(q, pool.k, pool.v, ind, idx, pool.kv_lens(), kernel="tensor_cores")


# ----------------------------------------------------------------------------- decode plan groups

def _rows_of(plan, batch, b):
    cap = (plan.numel() - batch) // 4
    return [u for u in range(cap) if int(plan[4 * u]) == b]


def _corrupt_plan(how, plan, batch):
    """A copy of ``plan`` with request 1's units made to disagree in one way (hip/paged_decode.h)."""
    p = plan.clone()
    cap = (p.numel() - batch) // 4
    rows = _rows_of(plan, batch, 1)
    assert len(rows) == 3
    if how == "row_names_no_request":
        p[4 * rows[1]] = 7
    elif how == "row_unused":
        p[4 * rows[1]: 4 * rows[1] + 4] = torch.tensor([-1, 0, 0, 0], dtype=torch.int32)
    elif how == "count_disagrees":
        p[4 * rows[2] + 3] = 2
    elif how == "count_past_rows":
        for u in rows:
            p[4 * u + 3] = 4
    elif how == "first_unit_out_of_range":
        p[4 * cap + 1] = 99
    return p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["mma", "cuda_core"])
@pytest.mark.parametrize("how", ["row_names_no_request", "row_unused", "count_disagrees",
                                 "count_past_rows", "first_unit_out_of_range"])
def test_bad_plan_then_good_plan(device, kernel, how):
    """A plan whose units of one request disagree is recorded, leaves the other requests right and
    the merge counters at zero, so the next call, with a good plan and fresh q, is right: a counter
    left part-way would merge that request early, over the NaN-filled workspace."""
    if device == "cpu" and kernel != "mma":
        pytest.skip("one reference on the CPU")
    if kernel == "mma" and device == "cuda" and not ops._api._matrix_kernel(torch.device("cuda"), "auto"):
        pytest.skip("no matrix-unit decode kernel on this GPU")
    pool = Pool(LENS, device, seed=3)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    h_q = H_KV * GROUP
    good = ops.decode_plan(LENS, PAGE, num_splits=3).to(device)
    bad = _corrupt_plan(how, good.cpu(), len(LENS)).to(device)
    cap = (good.numel() - len(LENS)) // 4
    cnt = torch.zeros(ops.decode_counter_words(len(LENS), h_q, H_KV), dtype=torch.int32, device=device)
    ws = torch.full((cap * h_q * (DIM + 2),), float("nan"), device=device)
    gen = torch.Generator().manual_seed(11)
    q1 = torch.randn(len(LENS), h_q, DIM, generator=gen).to(device, DT)
    q2 = torch.randn(len(LENS), h_q, DIM, generator=gen).to(device, DT)
    kw = dict(plan=None, counters=cnt, workspace=ws, kernel=kernel) if device == "cuda" else dict(plan=None)

    def run(q, plan):
        return ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, 0.125, **{**kw, "plan": plan})

    out = run(q1, bad)
    faults = {(f.op, f.check) for f in ops.take_errors(torch.device(device))}
    assert faults == {(D_OP, "plan")}, f"recorded {faults}"
    want1 = R.paged_decode(q1, pool.k, pool.v, indptr, indices, lens, 0.125)
    for b in (0, 2, 3):
        assert_close(out[b:b + 1], want1[b:b + 1], DT, what=f"{how}: untouched request {b}")
    if device == "cuda":
        assert int(cnt.abs().sum()) == 0, f"counters left {cnt.tolist()}"
    out2 = run(q2, good)
    assert ops.take_errors(torch.device(device)) == []
    want2 = R.paged_decode(q2, pool.k, pool.v, indptr, indices, lens, 0.125)
    assert_close(out2, want2, DT, what=f"{how}: the good plan after the bad one")
    if device == "cuda":
        assert int(cnt.abs().sum()) == 0


# ----------------------------------------------------------------------------- FP8 scale values

FP8 = torch.float8_e4m3fn
EXT_LENS, EXT_NEW = [37, 20], [5, 9]


def _fp8_setup(device, which, value):
    """FP8 caches of a small pool, per-KV-head scales with KV head 1's ``which`` set to ``value``."""
    pool = Pool(EXT_LENS, device, seed=5)
    ks = torch.tensor([0.02, 0.03], device=device)
    vs = torch.tensor([0.01, 0.015], device=device)
    kc, vc = R.quantize(pool.k, ks, FP8), R.quantize(pool.v, vs, FP8)
    bad = {"k_scale": ks.clone(), "v_scale": vs.clone()}
    bad[which][1] = value
    return pool, kc, vc, (ks, vs), (bad["k_scale"], bad["v_scale"])


def _scale_call(op, device, pool, kc, vc, scales, q, kernel):
    """The op on ``device``: the kernels on a GPU (unchecked: device scales are not read on the
    host), the reference directly on the CPU (the wrapper rejects bad host scales first)."""
    ks, vs = scales
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    if op == "store_kv":
        k = pool.k[pool.pages[0][0], :4].float().nan_to_num(0).to(DT).contiguous()
        slots = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device=device) + pool.pages[1][0] * PAGE
        kc2, vc2 = kc.clone(), vc.clone()
        fn = ops.store_kv if device == "cuda" else R.store_kv
        fn(kc2, vc2, k, k, slots, k_scale=ks, v_scale=vs)
        return torch.stack([kc2.view(torch.uint8), vc2.view(torch.uint8)])
    if op == "paged_decode":
        if device == "cuda":
            return ops.paged_decode(q, kc, vc, indptr, indices, lens, 0.125, kernel=kernel,
                                    num_splits=3, k_scale=ks, v_scale=vs)
        return R.paged_decode(q, kc, vc, indptr, indices, lens, 0.125, k_scale=ks, v_scale=vs)
    qo = torch.tensor([0, EXT_NEW[0], sum(EXT_NEW)], dtype=torch.int32, device=device)
    fn = ops.extend_attention if device == "cuda" else R.extend_attention
    return fn(q, kc, vc, qo, indptr, indices, lens, 0.125, k_scale=ks, v_scale=vs)


SCALE_OPS = [("store_kv", "auto"), ("paged_decode", "auto"), ("paged_decode", "cuda_core"),
             ("extend_attention", "auto")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,kernel", SCALE_OPS, ids=[f"{o}-{k}" for o, k in SCALE_OPS])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -0.5])
def test_bad_device_scale_is_recorded(device, op, kernel, which, value):
    """A scale value that is not finite and positive, read where the op runs, is recorded as
    (op, "k_scale" / "v_scale") and poisons exactly what that KV head touches with NaN; the other
    KV head is as with good scales."""
    if device == "cpu" and kernel != "auto":
        pytest.skip("one reference on the CPU")
    pool, kc, vc, good, bad = _fp8_setup(device, which, value)
    n_q = len(EXT_LENS) if op == "paged_decode" else sum(EXT_NEW)
    q = torch.randn(n_q, H_KV * GROUP, DIM, generator=torch.Generator().manual_seed(2)).to(device, DT)
    want = _scale_call(op, device, pool, kc, vc, good, q, kernel)
    assert ops.take_errors(torch.device(device)) == []
    got = _scale_call(op, device, pool, kc, vc, bad, q, kernel)
    assert ops.take_errors(torch.device(device)) == [ops.KernelFault(op, which)]
    assert "not finite and positive" in str(ops.KernelFault(op, which))
    if op == "store_kv":
        # [k|v, pages, page, H_kv, D] bytes: head 1 of the bad cache's new slots holds NaN codes
        # (0x7f / 0xff), head 0 and every other slot are as with good scales.
        side = 0 if which == "k_scale" else 1
        page = pool.pages[1][0]
        new = got[side, page, :4, 1]
        assert bool(((new & 0x7F) == 0x7F).all()), "bad scale: NaN codes expected"
        got[side, page, :4, 1] = want[side, page, :4, 1]
        assert torch.equal(got, want)
        return
    heads = torch.arange(H_KV * GROUP, device=device) // GROUP  # KV head of each query head
    assert bool(got[:, heads == 1].isnan().all()), "KV head 1's query heads must be NaN"
    assert_close(got[:, heads == 0], want[:, heads == 0], DT, what=f"{op}: KV head 0")
