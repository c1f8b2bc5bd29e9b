"""CPU tests of FP8 KV caches through radixkv.ops (the reference backend): quantise -> store ->
attend, against float32 attention over the dequantised cache built independently; the store's
codes against torch's own FP8 conversion; the scale checks (typed errors, caches untouched); and
the page remapping the GPU extend path uses for FP8 caches."""

from __future__ import annotations

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

import radixkv  # noqa: E402
from radixkv import ops  # noqa: E402
from radixkv.ops import _fp8  # noqa: E402
from radixkv.ops import reference as R  # noqa: E402

warnings.filterwarnings("ignore", message="radixkv.ops", category=RuntimeWarning)

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _cache(num_pages, page, heads, dim, layout, dtype):
    shape = (num_pages, page, heads, dim) if layout == "bshd" else (num_pages, heads, page, dim)
    return torch.zeros(shape, dtype=dtype)


def _scales(x, per_head, dtype):
    """amax / format max, per KV head ([H]) or per tensor ([])."""
    amax = x.float().abs().amax(dim=(0, 2)) if per_head else x.float().abs().amax()
    return (amax / R.FP8_MAX[dtype]).clamp(min=1e-8).to(torch.float32)


def _dense(cache, scale, layout):
    """The whole cache dequantised, as [num_pages, page, H, D] float32 (independent of gather_kv)."""
    tok = cache if layout == "bshd" else cache.permute(0, 2, 1, 3)
    s = scale if scale.dim() == 0 else scale.view(1, 1, -1, 1)
    return tok.float() * s


def _attend_f32(q, kd, vd, pages, lens, page, scale):
    """float32 decode attention of q [B, H_q, D] over dense float caches [P, page, H_kv, D]."""
    b_n, h_q, dim = q.shape
    h_kv = kd.shape[2]
    out = torch.zeros(b_n, h_q, dim)
    for b in range(b_n):
        n = int(lens[b])
        pos = torch.arange(n)
        pg = torch.tensor(pages[b], dtype=torch.int64)[pos // page]
        k = kd[pg, pos % page]  # [n, H_kv, D]
        v = vd[pg, pos % page]
        for h in range(h_q):
            kh = h // (h_q // h_kv)
            s = (k[:, kh] @ q[b, h].float()) * scale
            p = torch.softmax(s, dim=0)
            out[b, h] = p @ v[:, kh]
    return out


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("per_head", [False, True])
def test_quantize_store_decode(dtype, layout, page, per_head):
    gen = torch.Generator().manual_seed(page * 7 + per_head)
    h_kv, h_q, dim = 2, 8, 64
    lens = [1, 17, 70]
    need = [(n + page - 1) // page for n in lens]
    num_pages = sum(need) + 3
    perm = torch.randperm(num_pages, generator=gen)[: sum(need)]
    pages, off = [], 0
    for n in need:
        pages.append(perm[off: off + n].tolist())
        off += n
    kc = _cache(num_pages, page, h_kv, dim, layout, dtype)
    vc = torch.zeros_like(kc)
    ks_all, vs_all, slots = [], [], []
    for b, n in enumerate(lens):
        ks_all.append(torch.randn(n, h_kv, dim, generator=gen) * 3)
        vs_all.append(torch.randn(n, h_kv, dim, generator=gen))
        slots += [pages[b][t // page] * page + t % page for t in range(n)]
    k = torch.cat(ks_all).to(torch.bfloat16)
    v = torch.cat(vs_all).to(torch.bfloat16)
    k_scale, v_scale = _scales(k, per_head, dtype), _scales(v, per_head, dtype)
    ops.store_kv(kc, vc, k, v, torch.tensor(slots, dtype=torch.int32), layout=layout,
                 k_scale=k_scale, v_scale=v_scale)
    q = torch.randn(len(lens), h_q, dim, generator=gen).to(torch.bfloat16)
    indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(need), 0)), dtype=torch.int32)
    indices = torch.tensor(sum(pages, []), dtype=torch.int32)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    out = ops.paged_decode(q, kc, vc, indptr, indices, kv_lens, layout=layout,
                           k_scale=k_scale, v_scale=v_scale)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    scale = 1.0 / math.sqrt(dim)
    want = _attend_f32(q, _dense(kc, k_scale, layout), _dense(vc, v_scale, layout), pages, lens,
                       page, scale)
    rel = float((out.float() - want).norm() / want.norm())
    assert rel <= 2e-2, rel
    # Against the original (unquantised) values: the quantisation error itself, reported.
    kd = torch.zeros(num_pages, page, h_kv, dim)
    vd = torch.zeros_like(kd)
    s = torch.tensor(slots)
    kd[s // page, s % page] = k.float()
    vd[s // page, s % page] = v.float()
    orig = _attend_f32(q, kd, vd, pages, lens, page, scale)
    rel_orig = float((out.float() - orig).norm() / orig.norm())
    print(f"fp8 {dtype} {layout} page {page} per_head {per_head}: rel err vs dequantised "
          f"{rel:.2e}, vs original bf16 {rel_orig:.2e}")
    assert rel_orig < (0.08 if dtype == torch.float8_e4m3fn else 0.15), rel_orig


@pytest.mark.parametrize("dtype", FP8)
def test_store_codes_match_torch_and_saturate(dtype):
    gen = torch.Generator().manual_seed(1)
    h_kv, dim = 2, 16
    kc = _cache(4, 4, h_kv, dim, "bshd", dtype)
    vc = torch.zeros_like(kc)
    k = (torch.randn(5, h_kv, dim, generator=gen) * 100).to(torch.float16)
    v = torch.randn(5, h_kv, dim, generator=gen).to(torch.float16)
    k[0, 0, 0] = 60000.0  # far beyond e4m3's 448 after scaling: saturates
    k_scale = torch.tensor([0.5, 2.0])
    v_scale = torch.tensor([0.01, 0.02])
    slots = torch.tensor([3, -1, 0, 9, 15], dtype=torch.int32)
    ops.store_kv(kc, vc, k, v, slots, k_scale=k_scale, v_scale=v_scale)
    lim = R.FP8_MAX[dtype]
    for i, sl in enumerate(slots.tolist()):
        if sl < 0:
            continue
        p, o = divmod(sl, 4)
        want_k = (k[i].float() / k_scale.view(-1, 1)).clamp(-lim, lim).to(dtype)
        want_v = (v[i].float() / v_scale.view(-1, 1)).clamp(-lim, lim).to(dtype)
        assert torch.equal(kc[p, o].view(torch.uint8), want_k.view(torch.uint8))
        assert torch.equal(vc[p, o].view(torch.uint8), want_v.view(torch.uint8))
    assert float(kc[0, 3, 0, 0].float()) == lim  # the saturated element (slot 3 = token 0)
    written = {3, 0, 9, 15}
    for sl in range(16):
        if sl not in written:
            p, o = divmod(sl, 4)
            assert int(kc[p, o].view(torch.uint8).abs().sum()) == 0


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_extend_fp8_matches_dequantised(layout):
    gen = torch.Generator().manual_seed(3)
    dtype, page, h_kv, h_q, dim = torch.float8_e4m3fn, 16, 2, 4, 64
    num_pages = 8
    kc = (torch.randn(num_pages, page, h_kv, dim, generator=gen) * 50).to(dtype)
    vc = (torch.randn(num_pages, page, h_kv, dim, generator=gen) * 50).to(dtype)
    if layout == "bhsd":
        kc, vc = kc.permute(0, 2, 1, 3).contiguous(), vc.permute(0, 2, 1, 3).contiguous()
    k_scale = torch.tensor([0.02, 0.03])
    v_scale = torch.tensor([0.05, 0.04])
    lens = torch.tensor([20, 33], dtype=torch.int32)
    qo = torch.tensor([0, 5, 8], dtype=torch.int32)
    table = torch.tensor([[3, 5, 99], [0, 7, 2]], dtype=torch.int32)  # 99: out of range, unused
    q = torch.randn(8, h_q, dim, generator=gen).to(torch.float16)
    out = ops.extend_attention(q, kc, vc, qo, kv_lens=lens, block_tables=table, layout=layout,
                               k_scale=k_scale, v_scale=v_scale)
    # float32 reference over the dequantised cache, as a 16-bit cache
    kd = R.dequantize(kc if layout == "bshd" else kc.permute(0, 2, 1, 3), k_scale)
    vd = R.dequantize(vc if layout == "bshd" else vc.permute(0, 2, 1, 3), v_scale)
    if layout == "bhsd":
        kd, vd = kd.permute(0, 2, 1, 3), vd.permute(0, 2, 1, 3)
    want = R.extend_attention(q.float(), kd, vd, qo, kv_lens=lens, block_tables=table, layout=layout)
    rel = float((out.float() - want).norm() / want.norm())
    assert rel <= 2e-2, rel


def _setup(dtype=torch.float8_e4m3fn):
    kc = _cache(4, 16, 2, 64, "bshd", dtype)
    vc = torch.zeros_like(kc)
    k = torch.randn(3, 2, 64).to(torch.bfloat16)
    slots = torch.tensor([0, 1, 2], dtype=torch.int32)
    return kc, vc, k, slots


@pytest.mark.parametrize(
    "k_scale, v_scale, match",
    [
        (None, None, "needs k_scale"),
        (torch.tensor(1.0), None, "needs k_scale"),
        (torch.tensor([1.0, 1.0, 1.0]), torch.tensor(1.0), r"shape \[\] or \[2\]"),
        (torch.ones(1, 2), torch.ones(1, 2), r"shape \[\] or \[2\]"),
        (torch.tensor(1.0, dtype=torch.float16), torch.tensor(1.0), "float32"),
        (torch.tensor(1.0, device="meta"), torch.tensor(1.0), "is on meta"),
        (torch.tensor(1.0), torch.tensor([1.0, 1.0]), "same shape"),
        (torch.tensor(0.0), torch.tensor(1.0), "finite and > 0"),
        (torch.tensor([1.0, 1.0]), torch.tensor([1.0, -2.0]), "finite and > 0"),
        (torch.tensor(float("nan")), torch.tensor(1.0), "finite and > 0"),
        (torch.tensor(1.0), torch.tensor(float("inf")), "finite and > 0"),
    ],
)
def test_bad_scales_rejected_before_any_write(k_scale, v_scale, match):
    kc, vc, k, slots = _setup()
    with pytest.raises(radixkv.InvalidArgument, match=match):
        ops.store_kv(kc, vc, k, k, slots, k_scale=k_scale, v_scale=v_scale)
    assert int(kc.view(torch.uint8).sum()) == 0 and int(vc.view(torch.uint8).sum()) == 0
    q = torch.randn(1, 4, 64).to(torch.bfloat16)
    lens = torch.tensor([3], dtype=torch.int32)
    table = torch.tensor([[0]], dtype=torch.int32)
    with pytest.raises(radixkv.InvalidArgument, match=match):
        ops.paged_decode(q, kc, vc, kv_lens=lens, block_tables=table, k_scale=k_scale,
                         v_scale=v_scale)
    with pytest.raises(radixkv.InvalidArgument, match=match):
        ops.extend_attention(q, kc, vc, torch.tensor([0, 1], dtype=torch.int32), kv_lens=lens,
                             block_tables=table, k_scale=k_scale, v_scale=v_scale)


def test_scales_with_a_16bit_cache_and_bad_kv_dtypes_rejected():
    kc = _cache(4, 16, 2, 64, "bshd", torch.bfloat16)
    k = torch.randn(3, 2, 64).to(torch.bfloat16)
    slots = torch.tensor([0, 1, 2], dtype=torch.int32)
    with pytest.raises(radixkv.InvalidArgument, match="FP8 caches only"):
        ops.store_kv(kc, kc.clone(), k, k, slots, k_scale=torch.tensor(1.0),
                     v_scale=torch.tensor(1.0))
    fc = _cache(4, 16, 2, 64, "bshd", torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with pytest.raises(radixkv.InvalidArgument, match="FP8 cache"):
        ops.store_kv(fc, fc.clone(), k.to(torch.int8), k.to(torch.int8), slots, k_scale=one,
                     v_scale=one)
    with pytest.raises(radixkv.InvalidArgument, match="k_cache and v_cache must match"):
        ops.store_kv(fc, torch.zeros_like(fc, dtype=torch.float8_e5m2), k, k, slots, k_scale=one,
                     v_scale=one)


# ----------------------------------------------------------------------------- platform.h's bit math
# Python transliterations of hip/platform.h's fp8x4_to_f16x4 and float_to_fp8 (kept line by line
# in step with the C++), checked against torch's own FP8 conversions: every code, and random
# values from subnormal to saturating. The GPU tests check the compiled kernels themselves.


def _f2u(f):
    return int(torch.tensor([f], dtype=torch.float32).view(torch.int32)) & 0xFFFFFFFF


def _u2f(u):
    return float(torch.tensor([u & 0xFFFFFFFF], dtype=torch.int64).to(torch.int32).view(torch.float32))


def _fp8x4_to_f16x4(w, shifted):
    a = ((w & 0xFF) << 8) | ((w & 0xFF00) << 16)
    b = ((w >> 8) & 0xFF00) | (w & 0xFF000000)
    if not shifted:
        return a, b
    return ((a & 0x80008000) | ((a >> 1) & 0x3F803F80),
            (b & 0x80008000) | ((b >> 1) & 0x3F803F80))


def _float_to_fp8(f, e4):
    man, bias = (3, 7) if e4 else (2, 15)
    vmax, max_code = (448.0, 0x7E) if e4 else (57344.0, 0x7B)
    min_normal, sub_scale = (2.0**-6, 2.0**9) if e4 else (2.0**-14, 2.0**16)
    u = _f2u(f)
    sign = (u >> 24) & 0x80
    a = _u2f(u & 0x7FFFFFFF)
    if (u & 0x7FFFFFFF) > 0x7F800000:
        code = 0x7F
    elif a >= vmax:
        code = max_code
    elif a < min_normal:
        code = int(torch.tensor(a * sub_scale, dtype=torch.float32).round())  # round half even
    else:
        b = _f2u(a)
        b = (b + (1 << (22 - man)) - 1 + ((b >> (23 - man)) & 1)) & 0xFFFFFFFF
        e = (b >> 23) - 127 + bias
        code = min((e << man) | ((b >> (23 - man)) & ((1 << man) - 1)), max_code)
    return code | sign


@pytest.mark.parametrize("dtype", FP8)
def test_platform_bit_math_matches_torch(dtype):
    e4 = dtype == torch.float8_e4m3fn
    unit = 256.0 if e4 else 1.0
    for code in range(256):
        w = code | (((code * 7) & 0xFF) << 8) | (((code * 13) & 0xFF) << 16) | (((code * 29) & 0xFF) << 24)
        lo, hi = _fp8x4_to_f16x4(w, e4)
        halves = torch.tensor([lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16], dtype=torch.int32)
        got = halves.to(torch.int16).view(torch.float16).float() * unit
        src = torch.tensor([(w >> (8 * i)) & 0xFF for i in range(4)], dtype=torch.uint8)
        want = src.view(dtype).float()
        ok = want.isnan() | (got == want)
        assert bool(ok.all()), (hex(w), got.tolist(), want.tolist())
    gen = torch.Generator().manual_seed(0)
    lim = R.FP8_MAX[dtype]
    xs = torch.cat([torch.randn(300, generator=gen) * s for s in (1e-4, 1e-2, 1.0, 30.0, 300.0, 3e4, 1e6)]
                   + [torch.tensor([0.0, 2.0**-10, 2.0**-17, 447.9, 448.0, 464.0, 1e30, -1e30])])
    want = xs.clamp(-lim, lim).to(dtype).view(torch.uint8)
    got = torch.tensor([_float_to_fp8(float(x), e4) for x in xs.tolist()], dtype=torch.uint8)
    assert torch.equal(got, want), xs[got != want][:5].tolist()


# hip/extend_attention.cu's Fp8To16 for a bf16 q on NVIDIA: the 7 exponent/mantissa bits under
# bf16's (value x 2^-120 for e4m3, x 2^-112 for e5m2, subnormals landing on bf16 subnormals), then
# an exact bf16 multiply by the power of two. Transliterated and checked for every code.
def _fp8x4_to_bf16x4_placed(w, e4):
    mask, shift = (0x07F007F0, 4) if e4 else (0x0FE00FE0, 3)
    a = ((w & 0xFF) << 8) | ((w & 0xFF00) << 16)
    b = ((w >> 8) & 0xFF00) | (w & 0xFF000000)
    return ((a & 0x80008000) | ((a >> shift) & mask),
            (b & 0x80008000) | ((b >> shift) & mask))


@pytest.mark.parametrize("dtype", FP8)
def test_extend_bf16_bit_placement_matches_torch(dtype):
    e4 = dtype == torch.float8_e4m3fn
    power = 2.0**120 if e4 else 2.0**112
    pow_bits = 0x7B80 if e4 else 0x7780  # the kernel's bf16 constant
    assert torch.tensor([pow_bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item() == power
    for code in range(256):
        w = code | (((code * 7) & 0xFF) << 8) | (((code * 13) & 0xFF) << 16) | (((code * 29) & 0xFF) << 24)
        lo, hi = _fp8x4_to_bf16x4_placed(w, e4)
        halves = torch.tensor([lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16], dtype=torch.int32)
        placed = halves.to(torch.int16).view(torch.bfloat16)
        # the product in bf16 (what fma.rn.bf16x2 gives; exact, so any rounding agrees)
        got = placed * torch.tensor(power, dtype=torch.bfloat16)
        assert got.dtype == torch.bfloat16
        src = torch.tensor([(w >> (8 * i)) & 0xFF for i in range(4)], dtype=torch.uint8)
        want = src.view(dtype).float()
        ok = want.isnan() | ((got.float() == want) & (got.float().signbit() == want.signbit()))
        if not e4:  # e5m2 infinities and NaNs are not finite codes: store_kv never writes them
            ok |= want.isinf()
        assert bool(ok.all()), (hex(w), got.tolist(), want.tolist())
