"""Stateless, seeded sampling: the token at (seed, branch, step) depends only on the logits.

Sampling is Gumbel-max: ``argmax(logits / T + g)``. The noise ``g[j]`` for vocabulary entry ``j``
is a fixed integer hash of (seed, branch, step, j) turned into a uniform and then a Gumbel
variate, computed with torch integer ops, so the engine draws it for a whole batch on the GPU in
a few kernels and the dense reference (``verify.py``) re-derives every token on the CPU with the
same rule, row by row. ``temperature == 0`` is greedy.
"""

from __future__ import annotations

import torch

_MASK = (1 << 63) - 1
_M32 = 0xFFFFFFFF


def noise_seed(seed: int, branch: int, step: int) -> int:
    # A fixed integer mix (not Python's salted hash) so runs are reproducible across processes.
    x = (seed * 0x9E3779B97F4A7C15 + branch * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def key_words(seed: int, branch: int, step: int) -> tuple[int, int]:
    """The noise key as two 32-bit words (low, high), as the engine ships them to the device."""
    k = noise_seed(seed, branch, step)
    return k & _M32, (k >> 32) & _M32


def _mix(x: torch.Tensor) -> torch.Tensor:
    # 32-bit avalanche on int64 lanes holding values < 2**32; the multipliers are < 2**31, so
    # no product overflows int64 and CPU and GPU give the same bits.
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _M32
    return x ^ (x >> 16)


def gumbel(lo: torch.Tensor, hi: torch.Tensor, vocab: int) -> torch.Tensor:
    """float64 Gumbel noise ``[M, vocab]`` for keys ``lo``/``hi`` (int64 ``[M]``, < 2**32)."""
    j = torch.arange(vocab, device=lo.device, dtype=torch.int64)
    h = _mix(_mix(j.unsqueeze(0) ^ lo.unsqueeze(1)) ^ hi.unsqueeze(1))
    u = (h.double() + 0.5) * (1.0 / 4294967296.0)
    return -torch.log(-torch.log(u))


def sample_rows(logits: torch.Tensor, temps: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                any_temperature: bool) -> torch.Tensor:
    """Tokens (int64 ``[M]``) for fp32 ``logits [M, V]``; ``temps`` float32 ``[M]`` (0: greedy),
    ``lo``/``hi`` the rows' noise keys (int64 ``[M]``). ``any_temperature`` is known on the host
    and skips the noise when every row is greedy."""
    if not any_temperature:
        return torch.argmax(logits, dim=-1)
    t = temps.double().unsqueeze(1)
    noisy = logits.double() / torch.where(t > 0, t, torch.ones_like(t)) + gumbel(lo, hi, logits.shape[-1])
    scores = torch.where(t > 0, noisy, logits.double())
    return torch.argmax(scores, dim=-1)


def sample(logits: torch.Tensor, temperature: float, seed: int, branch: int, step: int) -> int:
    """Pick one token from fp32 ``logits`` [V] (the reference's per-row form of ``sample_rows``)."""
    if temperature == 0.0:
        return int(torch.argmax(logits))
    lo, hi = key_words(seed, branch, step)
    row = logits.reshape(1, -1)
    dev = row.device
    out = sample_rows(row, torch.tensor([temperature], dtype=torch.float32, device=dev),
                      torch.tensor([lo], device=dev), torch.tensor([hi], device=dev), True)
    return int(out[0])
