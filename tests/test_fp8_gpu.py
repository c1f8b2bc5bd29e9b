"""GPU tests of FP8 KV caches: store_kv's quantisation against the reference bit for bit,
paged_decode / extend_attention on FP8 caches against float32 attention over the dequantised
cache (relative error <= 2e-2; the error against the original 16-bit values is printed), graph
replay with scales changed on the device, opcheck of the new signatures, and the scale errors.
Skipped without a GPU.

Pools scatter requests over random pages; every other byte of the FP8 caches is a NaN code
(0x7f: e4m3fn NaN, e5m2 NaN) and outputs are NaN-poisoned before each call, so reads past a
sequence and unwritten outputs show. Run: ``pytest tests/test_fp8_gpu.py -q`` (``-s`` prints the
errors against the original values). The build can be narrowed with RADIXKV_HEAD_DIMS /
RADIXKV_DTYPES / RADIXKV_PAGE_SIZES / RADIXKV_KV_DTYPES (cases needing a variant left out are
skipped).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import radixkv  # noqa: E402
from radixkv import ops  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402
from _kernel_checks import ScatteredPages, lengths_for  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
    pytest.mark.usefixtures("extension_backend"),
]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NAME = {E4M3: "e4m3", E5M2: "e5m2", torch.bfloat16: "bf16", torch.float16: "fp16"}
TOL = 2e-2


def need(dim=None, page=None, dtype=None, kv=None):
    """Skip a case whose variant the JIT build left out (RADIXKV_* narrow it)."""
    def ok(env, value):
        want = os.environ.get(env)
        return value is None or not want or str(value) in [w.strip() for w in want.split(",")]

    if not (ok("RADIXKV_HEAD_DIMS", dim) and ok("RADIXKV_PAGE_SIZES", page)
            and ok("RADIXKV_DTYPES", NAME.get(dtype)) and ok("RADIXKV_KV_DTYPES", NAME.get(kv))):
        pytest.skip(f"variant not in this build (dim={dim}, page={page}, q={dtype}, kv={kv})")


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-12))


def scales_for(x, kv, per_head):
    amax = x.float().abs().amax(dim=(0, 2)) if per_head else x.float().abs().amax()
    return (amax / R.FP8_MAX[kv]).clamp(min=1e-6).float().cuda()


class Fp8Pool(ScatteredPages):
    """Requests on scattered pages of NaN-filled FP8 caches, written by ops.store_kv from fresh
    16-bit values (kept in .k16 / .v16 as [N, H_kv, D] with their slots)."""

    def __init__(self, lens, page, h_kv, dim, src, kv, layout, per_head, seed, spare=7):
        gen = torch.Generator().manual_seed(seed)
        super().__init__(lens, page, gen, spare)
        self.layout, self.kv = layout, kv
        shape = ((self.num_pages, page, h_kv, dim) if layout == "bshd"
                 else (self.num_pages, h_kv, page, dim))
        self.k = torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(kv)
        self.v = torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(kv)
        slots = []
        for b, n in enumerate(lens):
            slots += [self.pages[b][t // page] * page + t % page for t in range(n)]
        n_tok = len(slots)
        # fresh data, never zeros; K with larger spread than V, a few heads louder than others
        loud = torch.linspace(0.5, 4.0, h_kv).view(1, h_kv, 1)
        self.k16 = (torch.randn(n_tok, h_kv, dim, generator=gen) * loud).to(src).cuda()
        self.v16 = torch.randn(n_tok, h_kv, dim, generator=gen).to(src).cuda()
        self.slots = torch.tensor(slots, dtype=torch.int32, device="cuda")
        self.k_scale = scales_for(self.k16, kv, per_head)
        self.v_scale = scales_for(self.v16, kv, per_head)
        ops.store_kv(self.k, self.v, self.k16, self.v16, self.slots, layout=layout,
                     k_scale=self.k_scale, v_scale=self.v_scale)

    def original(self):
        """16-bit caches (float32) holding the unquantised values: the "before FP8" baseline."""
        shape = self.k.shape
        k = torch.zeros(shape, dtype=torch.float32, device="cuda")
        v = torch.zeros_like(k)
        s = self.slots.long()
        R._token_view(k, self.layout)[s // self.page, s % self.page] = self.k16.float()
        R._token_view(v, self.layout)[s // self.page, s % self.page] = self.v16.float()
        return k, v


# ----------------------------------------------------------------------------- store_kv


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("per_head", [False, True], ids=["tensor", "head"])
@pytest.mark.parametrize("src", [torch.bfloat16, torch.float16], ids=NAME.get)
def test_store_kv_fp8_matches_reference_bits(kv, layout, per_head, src):
    need(dtype=src, kv=kv)
    pool = Fp8Pool([5, 70, 1], 16, 4, 128, src, kv, layout, per_head, seed=3)
    kc = torch.full_like(pool.k.view(torch.uint8), 0x7F).view(kv).cpu()
    vc = kc.clone()
    R.store_kv(kc, vc, pool.k16.cpu(), pool.v16.cpu(), pool.slots.cpu(), layout,
               pool.k_scale.cpu(), pool.v_scale.cpu())
    assert torch.equal(pool.k.view(torch.uint8).cpu(), kc.view(torch.uint8))
    assert torch.equal(pool.v.view(torch.uint8).cpu(), vc.view(torch.uint8))


# ----------------------------------------------------------------------------- paged_decode

GRID = [
    # (q dtype, kv dtype, dim, page, layout, h_q, h_kv, per_head)
    *[(torch.bfloat16, E4M3, d, p, lay, 8, 2, ph) for d in (64, 128, 256) for p in (1, 16, 64)
      for lay in ("bshd", "bhsd") for ph in (False, True)],
    *[(torch.float16, E4M3, d, 16, "bshd", 8, 2, True) for d in (64, 128, 256)],
    *[(torch.bfloat16, E5M2, d, p, "bshd", 8, 2, True) for d in (64, 128, 256) for p in (1, 16)],
    *[(torch.float16, E5M2, 128, 64, "bhsd", 8, 2, False)],
    # GQA groups: 1, 4 (narrow form), 16 (one 16-row pass), 24 (16 + 8)
    *[(torch.bfloat16, E4M3, 128, 16, "bshd", g * 2, 2, True) for g in (1, 4, 16, 24)],
]


@pytest.mark.parametrize("qd, kv, dim, page, layout, h_q, h_kv, per_head", GRID,
                         ids=lambda x: NAME.get(x, str(x)))
@pytest.mark.parametrize("tables", [False, True], ids=["csr", "block_table"])
def test_paged_decode_fp8_matches_dequantised(qd, kv, dim, page, layout, h_q, h_kv, per_head,
                                               tables):
    need(dim, page, qd, kv)
    lens = lengths_for(page)
    pool = Fp8Pool(lens, page, h_kv, dim, qd, kv, layout, per_head, seed=dim + page + h_q)
    q = torch.randn(len(lens), h_q, dim, dtype=qd, device="cuda")
    if tables:
        args = dict(kv_lens=pool.kv_lens(), block_tables=pool.block_table(), layout=layout)
    else:
        indptr, indices = pool.csr()
        args = dict(kv_indptr=indptr, kv_indices=indices, kv_lens=pool.kv_lens(), layout=layout)
    sc = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
    ref = R.paged_decode(q.float(), pool.k, pool.v, **args, **sc).float()
    k0, v0 = pool.original()
    orig = R.paged_decode(q.float(), k0, v0, **args).float()
    for splits in (None, 1, 7):
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, out=out, num_splits=splits, **args, **sc)
        assert not out.isnan().any(), f"NaN in output (splits={splits})"
        err = rel_err(out, ref)
        assert err <= TOL, f"rel err {err:.2e} vs dequantised (splits={splits})"
    print(f"[fp8 decode {NAME[qd]}/{NAME[kv]} D{dim} page{page} {layout} G{h_q // h_kv} "
          f"{'head' if per_head else 'tensor'}] vs dequantised {err:.2e}, vs original "
          f"{rel_err(out, orig):.2e}")


def test_paged_decode_fp8_graph_replay_reads_scales_on_device():
    pool = Fp8Pool([700, 33, 1], 16, 8, 128, torch.bfloat16, E4M3, "bshd", True, seed=6)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    q = torch.randn(3, 32, 128, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    ks, vs = pool.k_scale.clone(), pool.v_scale.clone()
    plan = ops.decode_plan([700, 33, 1], 16, ops.decode_slots(32, 8), device="cuda")
    ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, out=out, k_scale=ks, v_scale=vs,
                     plan=plan)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, out=out, k_scale=ks, v_scale=vs,
                         plan=plan)
    for f in (1.0, 0.5, 2.0):
        q.copy_(torch.randn_like(q))
        ks.copy_(pool.k_scale * f)
        vs.copy_(pool.v_scale * (1.0 / f))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = R.paged_decode(q.float(), pool.k, pool.v, indptr, indices, lens, k_scale=ks,
                             v_scale=vs)
        assert rel_err(out, ref) <= TOL, f


def test_paged_decode_fp8_empty_long_and_many_splits():
    lens = [0, 4000, 1, 0, 2500]
    pool = Fp8Pool(lens, 16, 4, 128, torch.bfloat16, E4M3, "bshd", False, seed=11)
    q = torch.randn(len(lens), 16, 128, dtype=torch.bfloat16, device="cuda")
    indptr, indices = pool.csr()
    sc = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
    ref = R.paged_decode(q.float(), pool.k, pool.v, indptr, indices, pool.kv_lens(), **sc)
    for splits in (None, 1, 3, 64, 256):
        out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(),
                               num_splits=splits, **sc)
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.equal(out[3], out[0])
        assert rel_err(out, ref) <= TOL


# Units that average 1024 keys or more (estimated from the page list over the plan's rows) run the
# FP8 decode's 8-warp shape (paged_decode_mma.cuh, `longer`; the kernel log's "mma_8warp"), on
# grids of one block per SM or fewer (4 requests) and of more (72 requests x 2 KV heads > the
# SMs): ragged lengths past page edges, both layouts, CSR and block tables. One and two units per
# request are long; eight are not, and must run a 4-warp shape.
LONG_UNITS = {"few": [5000, 3001, 17, 4097],
              "many": [1100 + (977 * i) % 2100 for i in range(71)] + [1]}


@pytest.mark.parametrize("batch", ["few", "many"])
@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("tables", [False, True], ids=["csr", "block_table"])
def test_paged_decode_fp8_long_units(batch, page, layout, tables):
    need(128, page, torch.bfloat16, E4M3)
    lens, h_q, h_kv = LONG_UNITS[batch], 16, 2
    pool = Fp8Pool(lens, page, h_kv, 128, torch.bfloat16, E4M3, layout, page == 16, seed=page + 90)
    q = torch.randn(len(lens), h_q, 128, dtype=torch.bfloat16, device="cuda")
    if tables:
        args = dict(kv_lens=pool.kv_lens(), block_tables=pool.block_table(), layout=layout)
        listed = pool.block_table().numel() * page
    else:
        indptr, indices = pool.csr()
        args = dict(kv_indptr=indptr, kv_indices=indices, kv_lens=pool.kv_lens(), layout=layout)
        listed = indices.numel() * page
    sc = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
    ref = R.paged_decode(q.float(), pool.k, pool.v, **args, **sc).float()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if batch == "many":
        assert len(lens) * h_kv > sms, "the batch must be a grid of more blocks than SMs"
    ops.take_kernel_log()  # clear the record
    for splits, long_units in ((1, True), (2, True), (8, False)):
        plan = ops.decode_plan(lens, page, num_splits=splits, device="cuda")
        rows = (plan.numel() - len(lens)) // 4
        assert (listed >= 1024 * rows) == long_units, (listed, rows)
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, out=out, plan=plan, **args, **sc)
        ran = ops.take_kernel_log()
        assert ("mma_8warp" in ran) == long_units, (splits, ran)
        assert not out.isnan().any(), f"NaN in output (splits={splits})"
        err = rel_err(out, ref)
        assert err <= TOL, f"rel err {err:.2e} vs dequantised (splits={splits})"


@pytest.mark.parametrize("dim", [64, 128, 256])
def test_paged_decode_fp8_cuda_core_kernel(dim):
    need(dim)
    """kernel="cuda_core": the CUDA-core kernel (what gfx906-class parts run) on FP8 caches."""
    from radixkv.ops import take_kernel_log

    pool = Fp8Pool(lengths_for(16), 16, 2, dim, torch.bfloat16, E4M3, "bhsd", True, seed=21)
    q = torch.randn(len(pool.lens), 8, dim, dtype=torch.bfloat16, device="cuda")
    indptr, indices = pool.csr()
    sc = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
    ref = R.paged_decode(q.float(), pool.k, pool.v, indptr, indices, pool.kv_lens(),
                         layout="bhsd", **sc)
    for splits in (1, 5):
        out = torch.full_like(q, float("nan"))
        take_kernel_log()
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), out=out,
                         num_splits=splits, layout="bhsd", kernel="cuda_core", **sc)
        assert take_kernel_log() == {"cuda_core"}
        assert rel_err(out, ref) <= TOL


# ----------------------------------------------------------------------------- extend


# The kernel reads the FP8 pages itself (byte stages converted to q's type in shared memory, the
# K scale in the softmax scale, the V scale in the normalisation): every q dtype (bf16 and fp16
# take different conversions), both scale shapes, head dims, page sizes, layouts and table forms.


def _extend_case(kv, dim, page, layout, q_dtype, per_head, lens, new, tables, group=4, seed=0,
                 q_scale=1.0, **op_kw):
    need(dim, page, q_dtype, kv)
    pool = Fp8Pool(lens, page, 2, dim, q_dtype, kv, layout, per_head, seed=seed)
    qo = torch.tensor([0] + list(torch.tensor(new).cumsum(0)), dtype=torch.int32, device="cuda")
    q = (torch.randn(sum(new), 2 * group, dim, device="cuda") * q_scale).to(q_dtype)
    sc = dict(k_scale=pool.k_scale, v_scale=pool.v_scale)
    if tables:
        idx = dict(kv_lens=pool.kv_lens(), block_tables=pool.block_table())
    else:
        indptr, indices = pool.csr()
        idx = dict(kv_indptr=indptr, kv_indices=indices, kv_lens=pool.kv_lens())
    ref = R.extend_attention(q.float(), pool.k, pool.v, qo, layout=layout, **idx, **sc)
    out = torch.full_like(q, float("nan"))
    ops.extend_attention(q, pool.k, pool.v, qo, layout=layout, out=out, **idx, **sc, **op_kw)
    assert not out.isnan().any()
    err = rel_err(out, ref)
    assert err <= TOL, err
    # against the unquantised values (printed with -s): what FP8 storage costs
    k0, v0 = pool.original()
    orig = R.extend_attention(q.float(), k0, v0, qo, layout=layout, **idx)
    print(f"[fp8 extend] {NAME[kv]} q={NAME[q_dtype]} D={dim} page={page} {layout} "
          f"{'per-head' if per_head else 'per-tensor'}: err vs dequantised {err:.1e}, "
          f"vs original {rel_err(out, orig):.1e}")
    return pool, q, qo, idx, out


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float16], ids=NAME.get)
@pytest.mark.parametrize("dim, page, layout", [(128, 16, "bshd"), (64, 1, "bhsd"), (256, 64, "bshd"),
                                               (256, 1, "bshd"), (64, 16, "bshd"), (128, 1, "bhsd")])
def test_extend_fp8_matches_dequantised(kv, q_dtype, dim, page, layout):
    # ragged: one query, a long prefix, a single new token, a whole request new
    _extend_case(kv, dim, page, layout, q_dtype, True, [17, 1003, 130, 64], [17, 40, 1, 64],
                 tables=True, seed=dim + page)


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
def test_extend_fp8_bf16_q_beyond_fp16_range(kv):
    # On sm_90a the FP8 products run in fp16 and a bf16 q enters them times 2^-8: a q with
    # elements past fp16's largest value (65504) must still give finite, correct rows.
    _, q, *_ = _extend_case(kv, 128, 16, "bshd", torch.bfloat16, True, [300, 77], [64, 77],
                            tables=False, seed=5, q_scale=3e4)
    assert q.abs().max().item() > 65504


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("page", [1, 16])
def test_extend_fp8_page_edges_csr_per_tensor(kv, dim, page):
    # lengths on and next to page edges; queries cover whole requests and single tokens; GQA 8
    lens = lengths_for(page)
    new = [1, 17, 300, lens[3], page + 1 if page > 1 else 2]
    _extend_case(kv, dim, page, "bshd", torch.float16 if dim == 64 else torch.bfloat16, False, lens,
                 new, tables=False, group=8, seed=3 * dim + page)


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
@pytest.mark.parametrize("page", [1, 16])
def test_extend_fp8_short_context_kernel(kv, page):
    # FP8 caches: a max_kv_len of at most 256 keys picks the kernel that fits two CTAs per SM (on
    # sm_90a at D = 128; elsewhere it runs anyway); just above, the device's kernel for any length.
    lens, new = [1, 17, 256, 130, 64, 255], [1, 17, 40, 1, 64, 2]
    ops.take_kernel_log()  # clear the record
    ran = {}
    for seed, bound in enumerate((None, 256, 257)):
        kw = {} if bound is None else {"max_kv_len": bound}
        _extend_case(kv, 128, page, "bshd", torch.bfloat16, True, lens, new, tables=page == 16,
                     seed=seed + page, max_q_len=64, **kw)
        ran[bound] = ops.take_kernel_log()
    assert ran[None] in ({"extend"}, {"extend_ws"}), ran
    assert ran[256] == {"extend"} and ran[257] == ran[None], ran


def test_extend_fp8_scale_changes_output_like_reference():
    # Scales are read on the device per call: doubling V's scale doubles the output, doubling K's
    # sharpens the softmax exactly as the reference does.
    pool, q, qo, idx, out = _extend_case(E4M3, 128, 16, "bshd", torch.bfloat16, True,
                                         [200, 33], [50, 33], tables=True, seed=21)
    ks, vs = pool.k_scale * 2, pool.v_scale * 2
    out2 = ops.extend_attention(q, pool.k, pool.v, qo, k_scale=pool.k_scale, v_scale=vs, **idx)
    assert torch.allclose(out2.float(), 2 * out.float(), rtol=1e-2, atol=1e-3)
    out3 = ops.extend_attention(q, pool.k, pool.v, qo, k_scale=ks, v_scale=pool.v_scale, **idx)
    ref3 = R.extend_attention(q.float(), pool.k, pool.v, qo, k_scale=ks, v_scale=pool.v_scale, **idx)
    assert rel_err(out3, ref3) <= TOL
    assert rel_err(out3, out) > 1e-2  # the K scale did change the result


# ----------------------------------------------------------------------------- opcheck, errors


def test_opcheck_fp8_signatures():
    pool = Fp8Pool([40, 3], 16, 2, 128, torch.bfloat16, E4M3, "bshd", True, seed=9)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    q = torch.randn(2, 8, 128, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    ws = torch.empty(4 * 2 * 8 * 130, dtype=torch.float32, device="cuda")
    counters = torch.zeros(4, dtype=torch.int32, device="cuda")
    status = torch.zeros(3, dtype=torch.int32, device="cuda")
    # opcheck's test_schema compares tensors with arithmetic that torch does not implement for
    # float8 dtypes; the schemas (the same ones the 16-bit caches use) get that check in
    # tests/test_kernels_gpu.py. Fake tensors, autograd registration and AOT dispatch run here.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for splits in (1, 4):
        plan = ops.decode_plan(lens, 16, num_splits=splits, device="cuda")
        for kernel in (0, 2):
            torch.library.opcheck(torch.ops.radixkv.paged_decode.default,
                                  (q, pool.k, pool.v, indptr, indices, lens, out, ws, counters, 0.1,
                                   0, plan, status, kernel, pool.k_scale, pool.v_scale),
                                  test_utils=utils)
    kc = torch.zeros(8, 16, 2, 128, dtype=torch.uint8, device="cuda").view(E4M3)
    vc = torch.zeros_like(kc)
    k = torch.randn(5, 2, 128, dtype=torch.bfloat16, device="cuda")
    slots = torch.tensor([3, 17, 40, 127, 0], dtype=torch.int32, device="cuda")
    one = torch.tensor(0.01, device="cuda")
    torch.library.opcheck(torch.ops.radixkv.store_kv.default,
                          (kc, vc, k, k, slots, 0, status, one, one), test_utils=utils)
    assert int(status[0]) == 0  # good inputs: no fault recorded
    qo = torch.tensor([0, 2, 3], dtype=torch.int32, device="cuda")
    qx = torch.randn(3, 8, 128, dtype=torch.bfloat16, device="cuda")
    outx = torch.empty_like(qx)
    for scales, bound in (((pool.k_scale, pool.v_scale), 0), ((one, one), 40)):
        torch.library.opcheck(torch.ops.radixkv.extend_attention.default,
                              (qx, pool.k, pool.v, qo, indptr, indices, lens, outx, 0.1, 0, 3,
                               status, *scales, bound), test_utils=utils)
    assert int(status[0]) == 0


def test_bad_scales_rejected_on_gpu(monkeypatch):
    pool = Fp8Pool([40], 16, 2, 128, torch.bfloat16, E4M3, "bshd", True, seed=2)
    before = pool.k.view(torch.uint8).clone()
    indptr, indices = pool.csr()
    q = torch.randn(1, 8, 128, dtype=torch.bfloat16, device="cuda")
    qo1 = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    good = pool.k_scale
    bad = [
        (good.cpu(), "is on cpu"),
        (good.double(), "float32"),
        (torch.ones(3, device="cuda"), r"shape \[\] or \[2\]"),
        (torch.ones(1, 2, device="cuda"), r"shape \[\] or \[2\]"),
    ]
    for s, match in bad:
        with pytest.raises(radixkv.InvalidArgument, match=match):
            ops.store_kv(pool.k, pool.v, pool.k16, pool.v16, pool.slots, k_scale=s, v_scale=good)
        with pytest.raises(radixkv.InvalidArgument, match=match):
            ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), k_scale=s,
                             v_scale=good)
        with pytest.raises(radixkv.InvalidArgument, match=match):
            ops.extend_attention(q, pool.k, pool.v, qo1, indptr, indices, pool.kv_lens(), k_scale=good,
                                 v_scale=s)
    with pytest.raises(radixkv.InvalidArgument, match="needs k_scale"):
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens())
    with pytest.raises(radixkv.InvalidArgument, match="needs k_scale"):
        ops.extend_attention(q, pool.k, pool.v, qo1, indptr, indices, pool.kv_lens())
    # Checked mode reads the values (a sync); unchecked, a bad value poisons the output with NaN.
    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    for v in (0.0, -1.0, float("nan"), float("inf")):
        s = torch.full_like(good, v)
        with pytest.raises(radixkv.InvalidArgument, match="finite and > 0"):
            ops.store_kv(pool.k, pool.v, pool.k16, pool.v16, pool.slots, k_scale=s, v_scale=good)
        with pytest.raises(radixkv.InvalidArgument, match="finite and > 0"):
            ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), k_scale=good,
                             v_scale=s)
        with pytest.raises(radixkv.InvalidArgument, match="finite and > 0"):
            ops.extend_attention(q, pool.k, pool.v, qo1, indptr, indices, pool.kv_lens(), k_scale=s,
                                 v_scale=good)
    assert torch.equal(pool.k.view(torch.uint8), before)
    monkeypatch.delenv("RADIXKV_OPS_CHECK")
    ops.take_errors()
    out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), k_scale=good,
                           v_scale=torch.full_like(good, -1.0))
    assert out.isnan().all()
    for ks, vs in ((good, torch.full_like(good, -1.0)), (torch.full_like(good, float("nan")), good),
                   (torch.zeros_like(good), good)):
        out = ops.extend_attention(q, pool.k, pool.v, qo1, indptr, indices, pool.kv_lens(),
                                   k_scale=ks, v_scale=vs)
        assert out.isnan().all()
    kc = pool.k.clone()
    ops.store_kv(kc, pool.v.clone(), pool.k16, pool.v16, pool.slots,
                 k_scale=torch.zeros_like(good), v_scale=good)
    s = pool.slots.long()
    assert R._token_view(kc, "bshd")[s // 16, s % 16].view(E4M3).float().isnan().all()
    # ... and each op recorded which scale it read (guard.h Extra, radixkv.ops.take_errors).
    assert {(f.op, f.check) for f in ops.take_errors()} == {
        ("paged_decode", "v_scale"), ("extend_attention", "v_scale"), ("extend_attention", "k_scale"),
        ("store_kv", "k_scale")}


@pytest.mark.parametrize("kv", [E4M3, E5M2], ids=NAME.get)
@pytest.mark.parametrize("bound", [None, 256], ids=["ws", "short"])
def test_extend_fp8_with_plan(kv, bound):
    # An extend plan reorders the FP8 kernels' CTAs too (both kernels of sm_90a at D = 128).
    lens, new = ([1003, 17, 130, 64, 600], [40, 17, 1, 64, 300]) if bound is None else \
        ([1, 17, 256, 130, 64, 255], [1, 17, 40, 1, 64, 2])
    plan = ops.extend_plan(new, lens, 8, 2, 128)
    assert plan.tiles.shape[0] > 0
    kw = {} if bound is None else {"max_kv_len": bound}
    _extend_case(kv, 128, 16, "bshd", torch.bfloat16, True, lens, new, tables=False, seed=9,
                 plan=plan, check=True, **kw)
    assert ops.take_errors() == []
