"""Stateless, seeded sampling: the token at (seed, branch, step) depends only on the logits.

Sampling is Gumbel-max: ``argmax(logits / T + g)`` with noise ``g`` drawn from a generator seeded
by (seed, branch, step). Re-running the same rule on the dense reference logits must reproduce
every token, which is how ``verify.py`` checks sampled (``n > 1``) outputs exactly, not only greedy
ones.
"""

from __future__ import annotations

import torch

_MASK = (1 << 63) - 1


def noise_seed(seed: int, branch: int, step: int) -> int:
    # A fixed integer mix (not Python's salted hash) so runs are reproducible across processes.
    x = (seed * 0x9E3779B97F4A7C15 + branch * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sample(logits: torch.Tensor, temperature: float, seed: int, branch: int, step: int) -> int:
    """Pick one token from fp32 ``logits`` [V]."""
    if temperature == 0.0:
        return int(torch.argmax(logits))
    gen = torch.Generator().manual_seed(noise_seed(seed, branch, step))
    u = torch.rand(logits.shape[-1], generator=gen, dtype=torch.float64).clamp_(1e-12, 1.0 - 1e-12)
    gumbel = -torch.log(-torch.log(u))
    return int(torch.argmax(logits.double().cpu() / temperature + gumbel))
