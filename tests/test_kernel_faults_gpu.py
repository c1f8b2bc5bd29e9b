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
