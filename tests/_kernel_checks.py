"""Shared judgement of kernel outputs: each request and each head separately, the worst reported;
and the kernel tests' paged inputs (:class:`ScatteredPages`, :func:`lengths_for`).

One relative error over a whole batch hides a wrong long request behind the short ones, whose
outputs are large (a 1-token request's output is its value row). Here every (request, query row
of that request, head) block is compared with the float32 reference on its own, and the worst
block decides.

Tolerances (``TOL``) come from the error floor of each dtype, measured by
``tests/test_kernel_tolerance.py`` on the CPU: it replays the kernels' rounding (q, K, V already
16-bit in both; the probabilities P rounded to the dtype before the P V product, float32
accumulation, the output rounded to the dtype) on the GPU tests' shapes and lengths and takes the
worst per-(request, head) relative error. Measured floor: bf16 3.0e-3, fp16 3.5e-4 (rounding of
P and of the output: half an ulp is 2^-9 relative for bf16, 2^-12 for fp16; the worst blocks are
single-row requests at D = 64, where few elements average it). The tolerances are 3x the floor:
the GPU's accumulation order (split partitions, warps, MMA trees) differs from the simulation's,
which a factor 3 covers, while a wrong page of 16 keys in a 1003-token request (about 9% wrong)
is still 10x over the bf16 limit. The floor is simulated, not measured on a GPU yet.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

# The simulated floors (see the module docstring) and the tolerances, 3x those.
FLOOR = {torch.bfloat16: 3.0e-3, torch.float16: 3.5e-4}
TOL = {torch.bfloat16: 9e-3, torch.float16: 1.05e-3}


def request_errors(out: torch.Tensor, ref: torch.Tensor,
                   qo_indptr: Optional[Sequence[int]] = None) -> list[tuple[float, int, int]]:
    """``(rel_err, request, head)`` for every request and head: ``||out - ref|| / ||ref||`` over
    that request's rows of that head (``[N, H, D]`` tensors; ``qo_indptr`` gives each request's
    rows, default one row per request). A block whose reference is all zeros (an empty request)
    is judged by its absolute norm."""
    o, r = out.detach().float().cpu(), ref.detach().float().cpu()
    assert o.shape == r.shape, (o.shape, r.shape)
    bounds = list(qo_indptr) if qo_indptr is not None else list(range(o.shape[0] + 1))
    errs = []
    for b in range(len(bounds) - 1):
        q0, q1 = int(bounds[b]), int(bounds[b + 1])
        if q1 <= q0:
            continue
        d = (o[q0:q1] - r[q0:q1]).norm(dim=(0, 2))
        n = r[q0:q1].norm(dim=(0, 2))
        rel = torch.where(n > 0, d / n.clamp_min(1e-30), d)
        rel = torch.where(torch.isnan(rel), torch.full_like(rel, float("inf")), rel)
        for h in range(rel.numel()):
            errs.append((float(rel[h]), b, h))
    return errs


def worst_error(out: torch.Tensor, ref: torch.Tensor,
                qo_indptr: Optional[Sequence[int]] = None) -> tuple[float, int, int]:
    """The worst ``(rel_err, request, head)`` of :func:`request_errors` (``(0, -1, -1)`` if none)."""
    errs = request_errors(out, ref, qo_indptr)
    return max(errs) if errs else (0.0, -1, -1)


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype,
                 qo_indptr: Optional[Sequence[int]] = None, what: str = "") -> None:
    """Fail naming the worst request and head if any exceeds the dtype's tolerance."""
    err, b, h = worst_error(out, ref, qo_indptr)
    assert err < TOL[dtype], f"{what} worst request {b} head {h}: rel err {err:.2e} >= {TOL[dtype]:.1e}"


def lengths_for(page: int) -> list[int]:
    """Decode request lengths for a page size: 1, 17, ~1000, and lengths that are / are not
    multiples of the page size."""
    return [1, 17, 1003, 3 * page + 1 if page > 1 else 5, 2 * page]


class ScatteredPages:
    """Requests of ``lens`` tokens on pages scattered (by ``gen``) over a pool of the pages they
    need plus ``spare`` pages nobody owns; ``pages[b]`` lists request b's pages in order. The
    metadata views are int32 tensors on ``device``. Subclasses fill the caches, drawing their data
    from the same ``gen`` after the scatter."""

    def __init__(self, lens: Sequence[int], page: int, gen: torch.Generator, spare: int,
                 device: str = "cuda") -> None:
        self.lens, self.page, self.device = lens, page, device
        need = [-(-n // page) for n in lens]
        self.num_pages = sum(need) + spare
        perm = torch.randperm(self.num_pages, generator=gen).tolist()
        self.pages: list[list[int]] = []
        at = 0
        for n in need:
            self.pages.append(perm[at : at + n])
            at += n

    def csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(kv_indptr [B + 1], kv_indices [total pages])``."""
        indptr = [0]
        for p in self.pages:
            indptr.append(indptr[-1] + len(p))
        flat = [x for p in self.pages for x in p]
        return (torch.tensor(indptr, dtype=torch.int32, device=self.device),
                torch.tensor(flat, dtype=torch.int32, device=self.device))

    def block_table(self, pad: int = 2) -> torch.Tensor:
        """``[B, longest + pad]`` block table, padded with page 0."""
        cols = max(len(p) for p in self.pages) + pad
        bt = torch.zeros(len(self.pages), cols, dtype=torch.int32)
        for b, p in enumerate(self.pages):
            bt[b, : len(p)] = torch.tensor(p, dtype=torch.int32)
        return bt.to(self.device)

    def kv_lens(self) -> torch.Tensor:
        """``[B]`` request lengths."""
        return torch.tensor(self.lens, dtype=torch.int32, device=self.device)
