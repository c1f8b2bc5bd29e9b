"""CPU: where the GPU tests' tolerances come from, and proof that the per-request check catches
the faults a whole-batch error hid (issue 16).

The kernels' rounding is replayed in torch (``simulate``): q, K and V are the same 16-bit values
the reference upcasts; scores and sums in float32; the probabilities P rounded to the storage dtype
before the P V product (as the kernels' matrix operands are); the output rounded to the dtype. The
worst per-(request, head) error of that against float64 attention is the dtype's floor, which
``tests/_kernel_checks.py`` states and multiplies by its margin. Then three faults are planted in
the simulated output (a dropped 16-key page, a lost split partition, a dropped 64-key prefix tile,
on the GPU tests' own shapes) and each must fail the per-request check.
"""

from __future__ import annotations

import math

import pytest
import torch

from _kernel_checks import FLOOR, TOL, worst_error

LOG2E = 1.4426950408889634


def _make(lens, h_q, h_kv, dim, dtype, seed, q_rows=None, q_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    ks = [torch.randn(n, h_kv, dim, generator=g).to(dtype) for n in lens]
    vs = [torch.randn(n, h_kv, dim, generator=g).to(dtype) for n in lens]
    rows = q_rows if q_rows is not None else [1] * len(lens)
    qs = [(torch.randn(r, h_q, dim, generator=g) * q_scale).to(dtype) for r in rows]
    return qs, ks, vs


def _attend(q, k, v, scale, keep, dtype):
    """One request: q [L_q, H_q, D], k/v [L_k, H_kv, D], causal for the last L_q positions;
    ``keep`` [L_k] drops keys (a planted fault). dtype None: exact float64; else the kernels'
    rounding."""
    group = q.shape[1] // k.shape[1]
    n_q, n_k = q.shape[0], k.shape[0]
    work = torch.float64 if dtype is None else torch.float32
    kk = k.to(work).repeat_interleave(group, 1)
    vv = v.to(work).repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q.to(work), kk) * (scale * LOG2E)
    i = torch.arange(n_q).unsqueeze(1)
    j = torch.arange(n_k).unsqueeze(0)
    mask = (j <= i + (n_k - n_q)) & keep.unsqueeze(0)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp2(s - m)
    l_sum = p.sum(-1, keepdim=True)
    if dtype is not None:
        p = p.to(dtype).to(work)
    o = torch.einsum("hqk,khd->qhd", p, vv) / l_sum.permute(1, 0, 2)
    return o if dtype is None else o.to(dtype).float()


def _batch(qs, ks, vs, dtype, drop=None):
    """Outputs of every request stacked [sum L_q, H_q, D]; ``drop``: {request: key indices}."""
    scale = 1.0 / math.sqrt(qs[0].shape[-1])
    outs = []
    for b, (q, k, v) in enumerate(zip(qs, ks, vs)):
        keep = torch.ones(k.shape[0], dtype=torch.bool)
        if drop and b in drop:
            keep[drop[b]] = False
        outs.append(_attend(q, k, v, scale, keep, dtype).float())
    return torch.cat(outs)


def _indptr(qs):
    out = [0]
    for q in qs:
        out.append(out[-1] + q.shape[0])
    return out


# The GPU tests' shapes: decode lengths per page size (_kernel_checks.lengths_for), the split
# merge test's lengths, and the extend mixed batch (test_extend_gpu.MIXED).
DECODE_LENS = [[1, 17, 1003, 5, 2], [1, 17, 1003, 49, 32], [1, 17, 1003, 193, 128],
               [0 + 1, 5, 300, 2047]]
EXTEND_MIXED = [(0, 1), (3, 7), (0, 64), (130, 333), (1000, 7), (2500, 64), (17, 2048), (0, 333), (61, 1)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_error_floor_is_below_the_tolerance_with_its_margin(dtype):
    floor = 0.0
    for dim in (64, 128, 256):
        for i, lens in enumerate(DECODE_LENS):
            qs, ks, vs = _make(lens, 8, 2, dim, dtype, seed=dim + i)
            exact, sim = _batch(qs, ks, vs, None), _batch(qs, ks, vs, dtype)
            floor = max(floor, worst_error(sim, exact)[0])
    specs = EXTEND_MIXED
    qs, ks, vs = _make([p + e for p, e in specs], 4, 1, 64, dtype, seed=3,
                       q_rows=[e for _, e in specs], q_scale=1.5)
    floor = max(floor, worst_error(_batch(qs, ks, vs, dtype), _batch(qs, ks, vs, None), _indptr(qs))[0])
    # The stated floor is what this measures (to 10%), and the tolerance keeps its 3x margin.
    assert 0.9 * FLOOR[dtype] <= floor <= 1.1 * FLOOR[dtype], f"measured floor {floor:.2e}"
    assert TOL[dtype] >= 2.9 * floor


def test_dropped_page_of_the_long_decode_request_fails():
    """One 16-key page of the 1003-token request missing (bf16 decode grid, D = 128, page 16)."""
    qs, ks, vs = _make([1, 17, 1003, 49, 32], 8, 2, 128, torch.bfloat16, seed=1)
    exact = _batch(qs, ks, vs, None)
    good = _batch(qs, ks, vs, torch.bfloat16)
    bad = _batch(qs, ks, vs, torch.bfloat16, drop={2: torch.arange(16, 32)})
    assert worst_error(good, exact)[0] < TOL[torch.bfloat16]
    err, b, _ = worst_error(bad, exact)
    assert err > TOL[torch.bfloat16] and b == 2, (err, b)


def test_lost_split_partition_fails():
    """One of 64 split partitions (32 keys) of the 2047-token request lost in the merge
    (test_fused_merge_many_splits' shapes: 16 query heads on 2 KV heads)."""
    qs, ks, vs = _make([1, 5, 300, 2047], 16, 2, 128, torch.bfloat16, seed=2)
    exact = _batch(qs, ks, vs, None)
    bad = _batch(qs, ks, vs, torch.bfloat16, drop={3: torch.arange(32 * 10, 32 * 11)})
    err, b, _ = worst_error(bad, exact)
    assert err > TOL[torch.bfloat16] and b == 3, (err, b)


def test_dropped_prefix_tile_of_extend_fails():
    """The first 64-key tile of the (2500 prefix, 64 new) request's prefix missing (extend mixed
    batch, bf16)."""
    specs = EXTEND_MIXED
    qs, ks, vs = _make([p + e for p, e in specs], 4, 1, 64, torch.bfloat16, seed=4,
                       q_rows=[e for _, e in specs], q_scale=1.5)
    exact = _batch(qs, ks, vs, None)
    bad = _batch(qs, ks, vs, torch.bfloat16, drop={5: torch.arange(0, 64)})
    err, b, _ = worst_error(bad, exact, _indptr(qs))
    assert err > TOL[torch.bfloat16] and b == 5, (err, b)
