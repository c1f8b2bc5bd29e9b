"""CPU tests: the pure-torch reference ops against direct math on tiny cases, plus the wrappers'
validation (typed errors naming the bad value) and the split-KV sizing rule."""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import radixkv  # noqa: E402
from radixkv import ops  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402

warnings.filterwarnings("ignore", message="radixkv.ops", category=RuntimeWarning)


def softmax_attend(q, ks, vs, scale):
    """Direct math for one query vector against a list of key/value vectors (python floats)."""
    s = [scale * sum(a * b for a, b in zip(q, k)) for k in ks]
    m = max(s)
    w = [math.exp(x - m) for x in s]
    z = sum(w)
    return [sum(w[j] * vs[j][d] for j in range(len(ks))) / z for d in range(len(q))]


def make_cache(num_pages, page, heads, dim, layout, gen):
    shape = (num_pages, page, heads, dim) if layout == "bshd" else (num_pages, heads, page, dim)
    return torch.randn(shape, generator=gen, dtype=torch.float32)


def row(cache, layout, slot, page_size, h):
    p, o = divmod(slot, page_size)
    return (cache[p, o, h] if layout == "bshd" else cache[p, h, o]).tolist()


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_store_kv_addresses_each_slot(layout):
    gen = torch.Generator().manual_seed(0)
    kc = torch.zeros((5, 4, 2, 3) if layout == "bshd" else (5, 2, 4, 3))
    vc = torch.zeros_like(kc)
    k = torch.randn(3, 2, 3, generator=gen)
    v = torch.randn(3, 2, 3, generator=gen)
    slots = torch.tensor([7, 0, -1], dtype=torch.int32)  # -1 = padding, skipped
    R.store_kv(kc, vc, k, v, slots, layout)
    for i, s in enumerate([7, 0]):
        for h in range(2):
            assert row(kc, layout, s, 4, h) == k[i, h].tolist()
            assert row(vc, layout, s, 4, h) == v[i, h].tolist()
    assert int((kc != 0).sum()) == 2 * 2 * 3  # nothing else written


def test_copy_blocks_copies_whole_pages_only():
    kc = torch.arange(4 * 2 * 3, dtype=torch.float32).view(4, 2, 1, 3)
    vc = -kc.clone()
    before_k, before_v = kc.clone(), vc.clone()
    R.copy_blocks(kc, vc, torch.tensor([[1, 3], [0, 2]], dtype=torch.int32))
    assert torch.equal(kc[3], before_k[1]) and torch.equal(kc[2], before_k[0])
    assert torch.equal(vc[3], before_v[1]) and torch.equal(vc[2], before_v[0])
    assert torch.equal(kc[:2], before_k[:2])


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("page_size", [1, 3])
@pytest.mark.parametrize("tables", [False, True])
def test_paged_decode_matches_direct_math_with_gqa(layout, page_size, tables):
    gen = torch.Generator().manual_seed(1)
    h_q, h_kv, dim = 4, 2, 5
    kc = make_cache(12, page_size, h_kv, dim, layout, gen)
    vc = make_cache(12, page_size, h_kv, dim, layout, gen)
    lens = [4, 1]
    pages = [[7, 2, 9, 0][: -(-4 // page_size)], [5]]
    q = torch.randn(2, h_q, dim, generator=gen)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    if tables:
        bt = torch.zeros(2, 4, dtype=torch.int32)
        for b, p in enumerate(pages):
            bt[b, : len(p)] = torch.tensor(p)
        out = R.paged_decode(q, kc, vc, kv_lens=lens_t, block_tables=bt, layout=layout, sm_scale=0.7)
    else:
        indptr = torch.tensor([0, len(pages[0]), len(pages[0]) + 1], dtype=torch.int32)
        indices = torch.tensor(pages[0] + pages[1], dtype=torch.int32)
        out = R.paged_decode(q, kc, vc, indptr, indices, lens_t, 0.7, layout=layout)
    for b in range(2):
        slots = [pages[b][t // page_size] * page_size + t % page_size for t in range(lens[b])]
        for h in range(h_q):
            kvh = h // (h_q // h_kv)
            ks = [row(kc, layout, s, page_size, kvh) for s in slots]
            vs = [row(vc, layout, s, page_size, kvh) for s in slots]
            want = softmax_attend(q[b, h].tolist(), ks, vs, 0.7)
            assert out[b, h].tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_paged_decode_empty_request_gives_zeros_and_default_scale():
    gen = torch.Generator().manual_seed(2)
    kc = make_cache(3, 1, 1, 4, "bshd", gen)
    vc = make_cache(3, 1, 1, 4, "bshd", gen)
    q = torch.randn(2, 1, 4, generator=gen)
    indptr = torch.tensor([0, 0, 2], dtype=torch.int32)
    indices = torch.tensor([2, 1], dtype=torch.int32)
    lens = torch.tensor([0, 2], dtype=torch.int32)
    out = R.paged_decode(q, kc, vc, indptr, indices, lens)
    assert torch.equal(out[0], torch.zeros(1, 4))
    want = softmax_attend(q[1, 0].tolist(), [kc[2, 0, 0].tolist(), kc[1, 0, 0].tolist()],
                          [vc[2, 0, 0].tolist(), vc[1, 0, 0].tolist()], 1 / math.sqrt(4))
    assert out[1, 0].tolist() == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_extend_attention_shifted_causal_mask_and_gqa(layout):
    gen = torch.Generator().manual_seed(3)
    h_q, h_kv, dim, page_size = 6, 2, 4, 2
    kc = make_cache(16, page_size, h_kv, dim, layout, gen)
    vc = make_cache(16, page_size, h_kv, dim, layout, gen)
    # request 0: prefix 3 + extend 2 (L_k 5); request 1: no prefix, extend 3.
    l_k, l_q = [5, 3], [2, 3]
    pages = [[9, 4, 11], [6, 1]]
    q = torch.randn(sum(l_q), h_q, dim, generator=gen)
    qo = torch.tensor([0, 2, 5], dtype=torch.int32)
    indptr = torch.tensor([0, 3, 5], dtype=torch.int32)
    indices = torch.tensor(pages[0] + pages[1], dtype=torch.int32)
    lens = torch.tensor(l_k, dtype=torch.int32)
    out = R.extend_attention(q, kc, vc, qo, indptr, indices, lens, 0.5, layout=layout)
    for b in range(2):
        slots = [pages[b][t // page_size] * page_size + t % page_size for t in range(l_k[b])]
        for i in range(l_q[b]):
            visible = i + l_k[b] - l_q[b] + 1  # keys 0..i+(L_k-L_q)
            for h in range(h_q):
                kvh = h // (h_q // h_kv)
                ks = [row(kc, layout, s, page_size, kvh) for s in slots[:visible]]
                vs = [row(vc, layout, s, page_size, kvh) for s in slots[:visible]]
                want = softmax_attend(q[int(qo[b]) + i, h].tolist(), ks, vs, 0.5)
                assert out[int(qo[b]) + i, h].tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_extend_with_no_prefix_equals_plain_causal_attention():
    gen = torch.Generator().manual_seed(4)
    kc = make_cache(4, 1, 1, 3, "bshd", gen)
    vc = make_cache(4, 1, 1, 3, "bshd", gen)
    q = torch.randn(4, 1, 3, generator=gen)
    out = R.extend_attention(q, kc, vc, torch.tensor([0, 4], dtype=torch.int32),
                             torch.tensor([0, 4], dtype=torch.int32),
                             torch.tensor([0, 1, 2, 3], dtype=torch.int32),
                             torch.tensor([4], dtype=torch.int32))
    k, v = kc[:, 0, 0], vc[:, 0, 0]
    s = (q[:, 0] @ k.T) / math.sqrt(3)
    s = s.masked_fill(torch.triu(torch.ones(4, 4, dtype=torch.bool), 1), float("-inf"))
    assert torch.allclose(out[:, 0], torch.softmax(s, -1) @ v, atol=1e-6)


# ----------------------------------------------------------------------------- wrappers


def _decode_args(dtype=torch.bfloat16, dim=8):
    kc = torch.randn(6, 2, 2, dim, dtype=dtype)
    vc = torch.randn_like(kc)
    q = torch.randn(2, 4, dim, dtype=dtype)
    indptr = torch.tensor([0, 1, 3], dtype=torch.int32)
    indices = torch.tensor([5, 0, 3], dtype=torch.int32)
    lens = torch.tensor([2, 3], dtype=torch.int32)
    return q, kc, vc, indptr, indices, lens


def test_wrapper_runs_reference_on_cpu_and_matches_it():
    args = _decode_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ops.paged_decode(*args)
    assert torch.equal(got, R.paged_decode(*args))


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda a: (a[0].float(),) + a[1:], "dtype"),
        (lambda a: (a[0][:, :3],) + a[1:], "multiple of H_kv"),
        (lambda a: a[:3] + (a[3].long(),) + a[4:], "kv_indptr must be int32"),
        (lambda a: a[:3] + (a[3][:2],) + a[4:], r"batch \+ 1"),
        (lambda a: a[:5] + (a[5][:1],), "kv_lens has 1 entries"),
        (lambda a: (a[0][..., :4],) + a[1:], "head_dim 4"),
    ],
)
def test_wrapper_rejects_bad_input_naming_it(mutate, needle):
    with pytest.raises(radixkv.InvalidArgument, match=needle):
        ops.paged_decode(*mutate(_decode_args()))


def test_wrapper_rejects_unknown_layout_and_mismatched_caches():
    q, kc, vc, indptr, indices, lens = _decode_args()
    with pytest.raises(radixkv.InvalidArgument, match="'nhd'"):
        ops.paged_decode(q, kc, vc, indptr, indices, lens, layout="nhd")
    with pytest.raises(radixkv.InvalidArgument, match="must match"):
        ops.paged_decode(q, kc, vc[:3], indptr, indices, lens)
    with pytest.raises(radixkv.InvalidArgument, match="either block_tables"):
        ops.paged_decode(q, kc, vc, indptr, indices, lens, block_tables=indices.view(1, 3))


def test_kernel_size_check_names_supported_values():
    from radixkv.ops import _api

    with pytest.raises(radixkv.InvalidArgument, match=r"head_dim: 96 \(supported: 64, 128, 256\)"):
        _api._check_kernel_sizes(96, 16, torch.float16)
    with pytest.raises(radixkv.InvalidArgument, match=r"page_size: 8 \(supported: 1, 16, 64\)"):
        _api._check_kernel_sizes(128, 8, torch.float16)
    with pytest.raises(radixkv.InvalidArgument, match="float32"):
        _api._check_kernel_sizes(128, 16, torch.float32)


def test_decode_plan_cuts_by_length_and_slots():
    from radixkv import _core

    def counts(plan, batch):
        cap = (len(plan) - batch) // 4
        first = plan[4 * cap:]
        return [int(plan[4 * int(f) + 3]) for f in first]

    # One request of 32k tokens, 16 units at once: cut to fill them.
    plan, units, _ = _core.build_decode_plan([32768], 16, slots=16)
    assert units == 16 and counts(plan, 1) == [16]
    # A batch that already fills the slots: one unit each.
    _, units, _ = _core.build_decode_plan([512] * 256, 16, slots=66)
    assert units == 256
    # Short context: never cut below 128 tokens per unit.
    assert counts(_core.build_decode_plan([512], 16, slots=16)[0], 1) == [4]
    # Ragged: units in proportion to length.
    c = counts(_core.build_decode_plan([256, 32768], 16, slots=64)[0], 2)
    assert c[0] == 1 and c[1] >= 32
    # A smaller GPU cuts into fewer units.
    assert (_core.build_decode_plan([32768] * 4, 16, slots=5)[1]
            < _core.build_decode_plan([32768] * 4, 16, slots=33)[1])


def test_host_checks_catch_short_page_lists(monkeypatch):
    monkeypatch.setenv("RADIXKV_OPS_CHECK", "1")
    q, kc, vc, indptr, indices, lens = _decode_args()
    with pytest.raises(radixkv.InvalidArgument, match="needs 3 pages, has 2"):
        ops.paged_decode(q, kc, vc, indptr, indices, torch.tensor([2, 5], dtype=torch.int32))
    with pytest.raises(radixkv.InvalidArgument, match="out of range"):
        ops.paged_decode(q, kc, vc, indptr, torch.tensor([5, 0, 9], dtype=torch.int32), lens)


def test_status_word_made_under_inference_mode_clears_outside() -> None:
    """Engines run under torch.inference_mode, so the per-device status word is often first made
    there; take_errors() (outside that mode) must still clear it, not raise."""
    from radixkv.ops import _status

    dev = torch.device("cpu")
    _status._bufs.pop(dev, None)
    with torch.inference_mode():
        buf = _status.buffer(dev)
    assert not buf.is_inference()
    buf[0] = 1 << 3
    assert _status.take_errors(dev) != []
    assert int(buf[0]) == 0
    assert _status.take_errors(dev) == []
