"""GPU tests: every compiled kernel (store_kv, copy_blocks, paged_decode) against the pure-torch
reference on a grid of shapes. Skipped without a GPU.

Each case scatters pages at random over a pool whose unused slots (page tails, unused pages) hold
NaN, so any read past a sequence shows; outputs are poisoned with NaN before the call so an
unwritten element shows. Each request and head is judged on its own against the float32 reference
(tests/_kernel_checks.py: the worst ||out - ref|| / ||ref|| over (request, head), tolerances from
the measured rounding floor). Every test with good inputs must leave the device's fault record
empty (the autouse fixture), and the CUDA-core decode kernel (the one gfx906-class parts run) is
tested here on any GPU through ``paged_decode(kernel="cuda_core")``.
The build can be narrowed with RADIXKV_HEAD_DIMS / RADIXKV_DTYPES / RADIXKV_PAGE_SIZES (cases
needing a variant left out are skipped).
"""

from __future__ import annotations

import os
import random

import pytest

torch = pytest.importorskip("torch")

import radixkv  # noqa: E402
from radixkv import ops  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402
from _kernel_checks import TOL, ScatteredPages, assert_close, lengths_for, worst_error  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
    pytest.mark.usefixtures("extension_backend"),
]

DTYPES = [torch.float16, torch.bfloat16]
DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def built(dim=None, page=None, dtype=None) -> bool:
    """Whether this build has the variant (RADIXKV_* narrow the JIT build)."""
    def ok(env, value):
        want = os.environ.get(env)
        return not want or str(value) in [w.strip() for w in want.split(",")]

    return (dim is None or ok("RADIXKV_HEAD_DIMS", dim)) and (
        page is None or ok("RADIXKV_PAGE_SIZES", page)) and (
        dtype is None or ok("RADIXKV_DTYPES", DTYPE_NAME[dtype]))


def need(dim=None, page=None, dtype=None):
    if not built(dim, page, dtype):
        pytest.skip(f"variant not in this build (dim={dim}, page={page}, dtype={dtype})")


@pytest.fixture(autouse=True)
def _no_recorded_faults(request):
    """Good inputs record no fault (the device checks raise no false alarm); tests that plant bad
    inputs take their faults themselves."""
    ops.take_errors()
    yield
    assert ops.take_errors() == [], "an op recorded an input fault on good input"


class Pool(ScatteredPages):
    """A KV pool with `lens` requests on randomly scattered pages; every other slot is NaN."""

    def __init__(self, lens, page, h_kv, dim, dtype, layout, seed, spare_pages=7):
        gen = torch.Generator().manual_seed(seed)
        super().__init__(lens, page, gen, spare_pages)
        self.layout = layout
        shape = ((self.num_pages, page, h_kv, dim) if layout == "bshd"
                 else (self.num_pages, h_kv, page, dim))
        self.k = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        self.v = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        tok_k, tok_v = R._token_view(self.k, layout), R._token_view(self.v, layout)
        for b, n in enumerate(lens):
            pos = torch.arange(n)
            pg = torch.tensor(self.pages[b], dtype=torch.int64)[pos // page] if n else pos
            vals_k = torch.randn(n, h_kv, dim, generator=gen).to(dtype).cuda()
            vals_v = torch.randn(n, h_kv, dim, generator=gen).to(dtype).cuda()
            tok_k[pg.cuda(), (pos % page).cuda()] = vals_k
            tok_v[pg.cuda(), (pos % page).cuda()] = vals_v


# ----------------------------------------------------------------------------- paged_decode

DECODE_GRID = [
    # (dtype, dim, page, layout, h_q, h_kv)
    *[(dt, d, p, lay, 8, 2) for dt in DTYPES for d in (64, 128, 256) for p in (1, 16, 64)
      for lay in ("bshd", "bhsd")],
    *[(dt, 128, 16, "bshd", g * 2, 2) for dt in DTYPES for g in (1, 2, 3, 4, 8, 16)],
    # groups beyond one 16-head chunk of the matrix kernel: 24 = 16 + 8, 32 = 2 x 16
    *[(torch.bfloat16, 128, 1, "bshd", g * 2, 2) for g in (24, 32)],
    *[(torch.bfloat16, d, 1, "bhsd", 32, 2) for d in (64, 256)],
]


@pytest.mark.parametrize("dtype, dim, page, layout, h_q, h_kv", DECODE_GRID,
                         ids=lambda x: DTYPE_NAME.get(x, str(x)))
@pytest.mark.parametrize("tables", [False, True], ids=["csr", "block_table"])
def test_paged_decode_matches_reference(dtype, dim, page, layout, h_q, h_kv, tables):
    need(dim, page, dtype)
    lens = lengths_for(page)
    pool = Pool(lens, page, h_kv, dim, dtype, layout, seed=dim * 7 + page + h_q)
    q = torch.randn(len(lens), h_q, dim, dtype=dtype, device="cuda")
    kv_lens = pool.kv_lens()
    if tables:
        bt = pool.block_table()
        args = dict(kv_lens=kv_lens, block_tables=bt, layout=layout)
    else:
        indptr, indices = pool.csr()
        args = dict(kv_indptr=indptr, kv_indices=indices, kv_lens=kv_lens, layout=layout)
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), **args).float()
    for splits in (None, 1, 7):
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, out=out, num_splits=splits, **args)
        assert not out.isnan().any(), f"NaN in output (splits={splits})"
        assert_close(out, ref, dtype, what=f"splits={splits}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAME.get)
def test_paged_decode_empty_and_long_requests(dtype):
    need(128, 16, dtype)
    lens = [0, 4000, 1, 0, 2500]
    pool = Pool(lens, 16, 4, 128, dtype, "bshd", seed=11)
    q = torch.randn(len(lens), 16, 128, dtype=dtype, device="cuda")
    indptr, indices = pool.csr()
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
    for splits in (None, 1, 3, 64):
        out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), num_splits=splits)
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.equal(out[3], out[0])
        assert_close(out, ref, dtype, what=f"splits={splits}")


def test_paged_decode_split_count_does_not_change_the_result():
    need(128, 1, torch.bfloat16)
    pool = Pool([3000, 1500], 1, 8, 128, torch.bfloat16, "bshd", seed=5)
    q = torch.randn(2, 32, 128, dtype=torch.bfloat16, device="cuda")
    indptr, indices = pool.csr()
    outs = [ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), num_splits=s).float()
            for s in (1, 2, 5, 16, 64)]
    for o in outs[1:]:
        assert worst_error(o, outs[0])[0] < 4e-3  # only rounding of the partials differs


def test_paged_decode_custom_scale_and_cuda_graph_replay():
    need(128, 16, torch.bfloat16)
    pool = Pool([700, 33, 1], 16, 8, 128, torch.bfloat16, "bshd", seed=6)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    q = torch.randn(3, 32, 128, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    # The work plan is built on the host before capture (capture allows no read-back).
    plan = ops.decode_plan([700, 33, 1], 16, ops.decode_slots(32, 8), device="cuda")
    ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, 0.05, out=out, plan=plan)  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, 0.05, out=out, plan=plan)
    for _ in range(2):
        q.copy_(torch.randn_like(q))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, lens, 0.05)
        assert_close(out, ref, torch.bfloat16)


def test_paged_decode_rejects_unsupported_sizes():
    q = torch.randn(1, 4, 96, dtype=torch.bfloat16, device="cuda")
    kc = torch.randn(4, 16, 2, 96, dtype=torch.bfloat16, device="cuda")
    one = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    lens = torch.tensor([5], dtype=torch.int32, device="cuda")
    with pytest.raises(radixkv.InvalidArgument, match=r"head_dim: 96 \(supported: 64, 128, 256\)"):
        ops.paged_decode(q, kc, kc, one, one[:1], lens)
    q = torch.randn(1, 4, 128, dtype=torch.bfloat16, device="cuda")
    kc = torch.randn(4, 8, 2, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(radixkv.InvalidArgument, match=r"page_size: 8 \(supported: 1, 16, 64\)"):
        ops.paged_decode(q, kc, kc, one, one[:1], lens)
    with pytest.raises(radixkv.InvalidArgument, match="float32"):
        ops.paged_decode(q.float(), kc.float(), kc.float(), one, one[:1], lens)


# ----------------------------------------------------------------------------- store_kv


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAME.get)
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_store_kv_matches_reference(dtype, dim, page, layout):
    h_kv, num_pages, n = 4, 40, 37
    shape = (num_pages, page, h_kv, dim) if layout == "bshd" else (num_pages, h_kv, page, dim)
    kc = torch.randn(shape, dtype=dtype, device="cuda")
    vc = torch.randn(shape, dtype=dtype, device="cuda")
    slots = torch.randperm(num_pages * page)[:n].to(torch.int32)
    slots[5] = -1  # padding token: skipped
    slots = slots.cuda()
    # k, v as strided views of a fused qkv-like tensor (row stride > H*D).
    fused = torch.randn(n, 3, h_kv, dim, dtype=dtype, device="cuda")
    k, v = fused[:, 1], fused[:, 2]
    want_k, want_v = kc.clone(), vc.clone()
    R.store_kv(want_k, want_v, k, v, slots, layout)
    ops.store_kv(kc, vc, k, v, slots, layout=layout)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


# ----------------------------------------------------------------------------- copy_blocks


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAME.get)
@pytest.mark.parametrize("page, h_kv, dim", [(1, 8, 128), (16, 8, 128), (64, 2, 256), (1, 1, 4)])
def test_copy_blocks_matches_reference(dtype, page, h_kv, dim):
    num_pages = 64
    kc = torch.randn(num_pages, page, h_kv, dim, dtype=dtype, device="cuda")
    vc = torch.randn_like(kc)
    perm = torch.randperm(num_pages)
    pairs = torch.stack([perm[:20], perm[20:40]], 1).to(torch.int32).cuda()
    want_k, want_v = kc.clone(), vc.clone()
    R.copy_blocks(want_k, want_v, pairs)
    ops.copy_blocks(kc, vc, pairs)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


# ----------------------------------------------------------------------------- opcheck


def test_opcheck_every_op():
    need(128, 16, torch.bfloat16)
    dt = torch.bfloat16
    pool = Pool([40, 3], 16, 2, 128, dt, "bshd", seed=9)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    q = torch.randn(2, 8, 128, dtype=dt, device="cuda")
    out = torch.empty_like(q)
    ws = torch.empty(4 * 2 * 8 * 130, dtype=torch.float32, device="cuda")
    counters = torch.zeros(2 * 2 * 1, dtype=torch.int32, device="cuda")  # B * H_kv * ceil(G / 16)
    status = torch.zeros(3, dtype=torch.int32, device="cuda")
    for splits in (1, 4):
        plan = ops.decode_plan(lens, 16, num_splits=splits, device="cuda")
        for kernel in (0, 2):
            torch.library.opcheck(torch.ops.radixkv.paged_decode.default,
                                  (q, pool.k, pool.v, indptr, indices, lens, out, ws, counters, 0.1,
                                   0, plan, status, kernel))
    torch.library.opcheck(torch.ops.radixkv.paged_decode.default,
                          (q, pool.k, pool.v, None, pool.block_table(), lens, out, ws, counters, 0.1,
                           0, ops.decode_plan(lens, 16, num_splits=1, device="cuda"), status, 0))
    assert int(counters.abs().sum()) == 0  # every call leaves the merge counters at zero
    kc = torch.zeros(8, 16, 2, 128, dtype=dt, device="cuda")
    vc = torch.zeros_like(kc)
    k = torch.randn(5, 2, 128, dtype=dt, device="cuda")
    slots = torch.tensor([3, 17, 40, 127, 0], dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.radixkv.store_kv.default, (kc, vc, k, k, slots, 0, status))
    pairs = torch.tensor([[0, 5], [2, 7]], dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.radixkv.copy_blocks.default, (kc, vc, pairs, status))
    assert int(status[0]) == 0  # good inputs: no fault recorded


def test_random_fuzz_decode_against_reference():
    """A few random configurations (lengths, pages, groups) beyond the fixed grid."""
    rng = random.Random(1234)
    for _ in range(6):
        dim = rng.choice([d for d in (64, 128, 256) if built(dim=d)] or [128])
        page = rng.choice([p for p in (1, 16, 64) if built(page=p)] or [16])
        dt = rng.choice([d for d in DTYPES if built(dtype=d)] or [torch.bfloat16])
        need(dim, page, dt)
        h_kv = rng.choice([1, 2, 4])
        h_q = h_kv * rng.choice([1, 2, 4, 5, 8, 16])
        lens = [rng.randint(0, 2100) for _ in range(rng.randint(1, 6))]
        pool = Pool(lens, page, h_kv, dim, dt, rng.choice(["bshd", "bhsd"]), seed=rng.randint(0, 999))
        q = torch.randn(len(lens), h_q, dim, dtype=dt, device="cuda")
        indptr, indices = pool.csr()
        ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices,
                             pool.kv_lens(), layout=pool.layout)
        out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), layout=pool.layout)
        assert not out.isnan().any()
        assert_close(out, ref, dt, what=str((dim, page, dt, h_q, h_kv, lens)))


CUDA_CORE_GRID = [
    # (dtype, dim, page, layout, h_q, h_kv): every head dim and page size, both dtypes and
    # layouts, and GQA groups 1-16 (the kernel serves 8, 4, 2 or 1 query heads per block)
    *[(dt, d, p, "bshd", 8, 2) for dt in DTYPES for d in (64, 128, 256) for p in (1, 16, 64)],
    *[(torch.bfloat16, 128, 16, "bhsd", g * 2, 2) for g in (1, 2, 3, 6, 16)],
]


@pytest.mark.parametrize("dtype, dim, page, layout, h_q, h_kv", CUDA_CORE_GRID,
                         ids=lambda x: DTYPE_NAME.get(x, str(x)))
def test_cuda_core_kernel_matches_reference(dtype, dim, page, layout, h_q, h_kv):
    """The portable CUDA-core kernel (gfx906 class), forced on any GPU; the kernel's own record
    says it was the one that ran, and only it."""
    need(dim, page, dtype)
    pool = Pool(lengths_for(page), page, h_kv, dim, dtype, layout, seed=21 + dim + page + h_q)
    q = torch.randn(len(pool.lens), h_q, dim, dtype=dtype, device="cuda")
    indptr, indices = pool.csr()
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens(),
                         layout=layout)
    for splits in (None, 1, 5):
        out = torch.full_like(q, float("nan"))
        ops.take_kernel_log()
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), out=out,
                         num_splits=splits, layout=layout, kernel="cuda_core")
        assert ops.take_kernel_log() == {"cuda_core"}, "kernel='cuda_core' was not honoured"
        assert not out.isnan().any(), f"NaN in output (splits={splits})"
        assert_close(out, ref, dtype, what=f"splits={splits}")
    ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), layout=layout)
    assert "cuda_core" not in ops.take_kernel_log() or torch.version.hip is not None


# ----------------------------------------------------------------------------- fused split merge


@pytest.mark.parametrize("splits", [2, 64, 200, 256])
def test_fused_merge_many_splits_and_counters_reset(splits):
    """Many partitions, including more partitions than tiles or keys (empty ones), merged by the
    last block of each (request, KV head, chunk); the counters must be zero after every call, so
    one counter buffer serves the next call of any shape (and graph replays)."""
    need(128, 1, torch.bfloat16)
    from radixkv.ops import _api

    lens = [1, 5, 300, 2047, 0]
    h_q, h_kv = 16, 2
    pool = Pool(lens, 1, h_kv, 128, torch.bfloat16, "bshd", seed=31 + splits)
    indptr, indices = pool.csr()
    ws = torch.full((splits * len(lens) * h_q * 130,), float("nan"), device="cuda")  # never read unwritten
    for rep in range(3):
        q = torch.randn(len(lens), h_q, 128, dtype=torch.bfloat16, device="cuda")
        ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), out=out,
                         workspace=ws, num_splits=splits)
        torch.cuda.synchronize()
        assert not out.isnan().any(), f"unwritten output (rep {rep})"
        assert torch.equal(out[4], torch.zeros_like(out[4]))
        assert_close(out, ref, torch.bfloat16, what=f"rep {rep}")
        assert int(_api._counter_bufs[q.device].abs().sum()) == 0


@pytest.mark.parametrize("page", [1, 16])
def test_fused_merge_publishes_before_its_ticket(page):
    """The merge's ticket protocol, repeated: a graph that poisons the workspace with NaN and then
    decodes two requests cut into many units is replayed 300 times. The merging block reads the
    other blocks' partials after their tickets, so a partial read before it was published would be
    NaN (or a partial of a different q), and every replay's output must equal the first, bit for bit
    (the merge sums in a fixed order)."""
    need(128, page, torch.bfloat16)
    lens = [4000, 1500]
    h_q, h_kv = 32, 8
    pool = Pool(lens, page, h_kv, 128, torch.bfloat16, "bshd", seed=91 + page)
    indptr, indices = pool.csr()
    kv_lens = pool.kv_lens()
    plan = ops.decode_plan(lens, page, num_splits=32, device="cuda")
    ws = torch.empty(32 * len(lens) * h_q * 130, device="cuda")
    qs = [torch.randn(len(lens), h_q, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    q = qs[0].clone()
    out = torch.empty_like(q)

    def step():
        ws.fill_(float("nan"))
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, kv_lens, out=out, workspace=ws, plan=plan)

    step()  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    firsts = []
    for qv in qs:
        q.copy_(qv)
        graph.replay()
        firsts.append(out.clone())
    torch.cuda.synchronize()
    for qv, first in zip(qs, firsts):
        ref = R.paged_decode(qv.float(), pool.k.float(), pool.v.float(), indptr, indices, kv_lens)
        assert_close(first, ref, torch.bfloat16)
    mismatches = torch.zeros((), dtype=torch.int64, device="cuda")
    for rep in range(300):
        q.copy_(qs[rep % 2])  # consecutive replays merge different partials
        graph.replay()
        mismatches += (out != firsts[rep % 2]).sum()
    torch.cuda.synchronize()
    assert int(mismatches) == 0, f"{int(mismatches)} output elements differed from the first replay"


def test_caller_counters_and_workspace():
    """A caller's own counters and workspace (calls on several streams need their own): used
    instead of the cached ones, left zeroed; wrong dtype / size / device rejected by name."""
    need(128, 1, torch.bfloat16)
    lens = [700, 3, 1200]
    h_q, h_kv = 32, 8
    pool = Pool(lens, 1, h_kv, 128, torch.bfloat16, "bshd", seed=77)
    indptr, indices = pool.csr()
    q = torch.randn(len(lens), h_q, 128, dtype=torch.bfloat16, device="cuda")
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
    words = ops.decode_counter_words(len(lens), h_q, h_kv)
    cnt = torch.zeros(words, dtype=torch.int32, device="cuda")
    ws = torch.empty(8 * len(lens) * h_q * 130, device="cuda")
    out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), workspace=ws,
                           counters=cnt, num_splits=8)
    torch.cuda.synchronize()
    assert_close(out, ref, torch.bfloat16)
    assert int(cnt.abs().sum()) == 0
    for bad in (torch.zeros(words, dtype=torch.int64, device="cuda"),
                torch.zeros(words - 1, dtype=torch.int32, device="cuda"),
                torch.zeros(words, dtype=torch.int32)):
        with pytest.raises(radixkv.InvalidArgument, match="counters"):
            ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), counters=bad,
                             num_splits=8)
    for bad in (torch.empty(ws.numel(), dtype=torch.int32, device="cuda"),
                torch.empty(7, device="cuda"), torch.empty(ws.numel())):
        with pytest.raises(radixkv.InvalidArgument, match="workspace"):
            ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), workspace=bad,
                             num_splits=8)


def test_group_16_in_one_pass_matches_group_chunks():
    """A GQA group of 16 is one 16-row chunk of the matrix kernel; 48 heads on one KV head are three."""
    need(128, 16, torch.bfloat16)
    for h_q, h_kv in ((16, 1), (48, 1)):
        pool = Pool([1500, 40, 7], 16, h_kv, 128, torch.bfloat16, "bhsd", seed=h_q)
        q = torch.randn(3, h_q, 128, dtype=torch.bfloat16, device="cuda")
        indptr, indices = pool.csr()
        ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices,
                             pool.kv_lens(), layout="bhsd")
        for splits in (None, 1, 9):
            out = torch.full_like(q, float("nan"))
            ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), layout="bhsd",
                             out=out, num_splits=splits)
            assert_close(out, ref, torch.bfloat16, what=str((h_q, splits)))


def test_split_graph_replay_reuses_counters():
    """A split decode captured in a CUDA graph and replayed: the fused merge must reset its
    counters inside the graph, or the second replay would merge at the wrong block."""
    need(128, 1, torch.bfloat16)
    pool = Pool([3000, 100], 1, 8, 128, torch.bfloat16, "bshd", seed=41)
    indptr, indices = pool.csr()
    lens = pool.kv_lens()
    q = torch.randn(2, 32, 128, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    plan = ops.decode_plan([3000, 100], 1, num_splits=24, device="cuda")
    ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, out=out, plan=plan)  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, lens, out=out, plan=plan)
    for _ in range(3):
        q.copy_(torch.randn_like(q))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, lens)
        assert not out.isnan().any()
        assert_close(out, ref, torch.bfloat16)


def test_bad_page_indices_read_nothing():
    """Page indices outside the pool are skipped (masked keys), never read: NaN pages around them."""
    need(128, 16, torch.bfloat16)
    pool = Pool([64, 40], 16, 2, 128, torch.bfloat16, "bshd", seed=51)
    indptr, indices = pool.csr()
    bad = indices.clone()
    bad[1] = pool.num_pages + 3  # request 0's second page: out of range
    q = torch.randn(2, 8, 128, dtype=torch.bfloat16, device="cuda")
    # Reference: the same attention without those 16 keys (their page replaced by a page of
    # keys with -inf scores is not expressible; compare against a pool without that page instead).
    keep = torch.ones(64, dtype=torch.bool)
    keep[16:32] = False
    tok_k = R._token_view(pool.k, "bshd")
    tok_v = R._token_view(pool.v, "bshd")
    pg = torch.tensor(pool.pages[0], dtype=torch.int64)
    pos = torch.arange(64)[keep]
    k0 = tok_k[pg[pos // 16].cuda(), (pos % 16).cuda()].float()  # [48, H_kv, D]
    v0 = tok_v[pg[pos // 16].cuda(), (pos % 16).cuda()].float()
    group = 4
    qh = q[0].float().view(2, group, 128)
    s = torch.einsum("hgd,thd->hgt", qh, k0) / 128 ** 0.5
    want0 = torch.einsum("hgt,thd->hgd", s.softmax(-1), v0).reshape(8, 128)
    for splits in (1, 3):
        out = ops.paged_decode(q, pool.k, pool.v, indptr, bad, pool.kv_lens(), num_splits=splits)
        assert not out.isnan().any()
        assert_close(out[:1], want0.unsqueeze(0), torch.bfloat16, what=f"splits={splits}")
        assert ops.take_errors() == [ops.KernelFault("paged_decode", "page_range")]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAME.get)
@pytest.mark.parametrize("page", [1, 16])
def test_grid_beyond_one_block_per_sm_matches_reference(dtype, page):
    """More blocks than SMs: the matrix kernel switches to its 96 KB shape (two blocks per SM)."""
    need(128, page, dtype)
    rng = random.Random(page)
    lens = [rng.randint(0, 700) for _ in range(48)]  # 48 requests x 4 KV heads = 192 blocks
    pool = Pool(lens, page, 4, 128, dtype, "bshd", seed=61 + page)
    q = torch.randn(len(lens), 16, 128, dtype=dtype, device="cuda")
    indptr, indices = pool.csr()
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
    for splits in (None, 3):
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), out=out, num_splits=splits)
        assert not out.isnan().any()
        assert_close(out, ref, dtype, what=f"splits={splits}")


@pytest.mark.parametrize("kernel", ["auto", "cuda_core"])
@pytest.mark.parametrize("page", [1, 16])
def test_ragged_batch_through_balanced_plan(kernel, page):
    """A ragged batch (one long request among short ones) through the Rust-built plan: the long
    request is cut into many units and merged, the short ones are written directly; a padded
    plan (unused rows, as a CUDA graph's buffer holds) gives the same result."""
    need(128, page, torch.bfloat16)
    from radixkv import _core

    lens = [20000, 3, 700, 1, 0, 129, 4096, 64]
    h_q, h_kv = 32, 8
    pool = Pool(lens, page, h_kv, 128, torch.bfloat16, "bshd", seed=90 + page)
    indptr, indices = pool.csr()
    q = torch.randn(len(lens), h_q, 128, dtype=torch.bfloat16, device="cuda")
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
    slots = ops.decode_slots(h_q, h_kv, kernel=kernel)
    tight = ops.decode_plan(lens, page, slots, device="cuda")
    padded = ops.decode_plan(lens, page, slots, device="cuda",
                             capacity=_core.decode_plan_capacity(len(lens), slots))
    rows = tight.cpu()[: tight.numel() - len(lens)].view(-1, 4)
    assert int(rows[0, 3]) > 1, "the long request must be cut"
    for plan in (tight, padded):
        out = torch.full_like(q, float("nan"))
        ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), out=out, plan=plan,
                         kernel=kernel)
        torch.cuda.synchronize()
        assert torch.equal(out[4], torch.zeros_like(out[4]))
        assert_close(out, ref, torch.bfloat16, what=f"capacity {plan.numel()}")
    # Without a plan the op plans the same way from kv_lens (read back on the host).
    out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), kernel=kernel)
    assert_close(out, ref, torch.bfloat16, what="op-built plan")


@pytest.mark.parametrize("kernel", ["auto", "cuda_core"])
def test_bad_plan_rows_are_skipped_and_recorded(kernel):
    """A plan row naming no request, or a unit count out of range, is recorded in the status word
    (word 2) and reads nothing outside the batch. The merge counters are left zero (a request
    whose rows disagree does not count), so the next call with a good plan is right as it is."""
    need(128, 1, torch.bfloat16)
    lens = [3000, 50]
    pool = Pool(lens, 1, 8, 128, torch.bfloat16, "bshd", seed=5)
    indptr, indices = pool.csr()
    q = torch.randn(2, 32, 128, dtype=torch.bfloat16, device="cuda")
    good = ops.decode_plan(lens, 1, num_splits=4, device="cuda")
    bad = good.clone()
    bad[4 * 1] = 9        # unit 1 names request 9 of a batch of 2
    bad[4 * 4 + 3] = 999  # unit 4's unit count out of range
    ops.take_errors()
    ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), plan=bad, kernel=kernel)
    torch.cuda.synchronize()
    assert ("paged_decode", "plan") in {(f.op, f.check) for f in ops.take_errors()}
    from radixkv.ops import _api

    assert int(_api._counter_bufs[q.device].abs().sum()) == 0
    ref = R.paged_decode(q.float(), pool.k.float(), pool.v.float(), indptr, indices, pool.kv_lens())
    for _ in range(2):
        out = ops.paged_decode(q, pool.k, pool.v, indptr, indices, pool.kv_lens(), plan=good,
                               kernel=kernel)
        torch.cuda.synchronize()
        assert_close(out, ref, torch.bfloat16, what="good plan after a bad one")
