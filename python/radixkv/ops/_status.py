"""The per-device status word the ops write their input faults into (``hip/guard.h``).

Every op takes a small int32 buffer, one per device, cached here. The kernels set one bit per
(op, check) in word 0 by ``atomicOr`` when they meet bad metadata (which they clamp or skip, so
nothing outside the cache is read), the decode and extend kernels set a bit per kernel kind in
word 1, and word 2 holds checks outside the per-op bytes (a bad decode or extend plan; an FP8 ``k_scale`` /
``v_scale`` that is not finite and positive, read on the device).
Writing it costs the op path nothing: no allocation, no synchronisation, a fixed buffer (CUDA-graph
safe; warm it up, i.e. make one call on the device, before capture). :func:`take_errors` reads and
clears it; that call synchronises. The reference ops report the same faults into a host-side word.

Keep the tables below in step with ``hip/guard.h``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

OPS = ("store_kv", "copy_blocks", "paged_decode", "extend_attention")

# bit within an op's byte -> (name, what it means)
CHECKS = (
    ("page_range", "a page index outside [0, num_pages) (skipped)"),
    ("indptr_order", "kv_indptr negative or decreasing (clamped)"),
    ("indptr_overrun", "kv_indptr past the end of kv_indices (clamped)"),
    ("len_negative", "a negative kv_lens entry (treated as 0)"),
    ("len_beyond_pages", "kv_lens beyond the tokens its pages hold (clamped)"),
    ("qo_indptr", "qo_indptr negative, decreasing or past the rows of q (request skipped)"),
    ("queries_exceed_keys", "a request with more queries than keys (NaN rows)"),
    ("slot_range", "a slot >= num_pages * page_size (token skipped)"),
)
CHECK_BIT = {name: 1 << i for i, (name, _) in enumerate(CHECKS)}

# word 1: kernels that ran (decode's three, then extend's two, then decode's 8-warp shape)
KERNELS = ("mma", "mma_narrow", "cuda_core", "extend", "extend_ws", "mma_8warp")

# word 2: checks of no one op's byte (the op bytes of word 0 are full), bit -> (op, name, what it
# means)
_SCALE = "not finite and positive (read on the device; the op wrote NaN)"
EXTRA_CHECKS = (
    ("paged_decode", "plan", "a decode plan row naming no request, not a range, a unit count "
     "outside [1, 256], a first unit outside the plan, or units of a request whose rows disagree "
     "(skipped or clamped; such a request's units are not merged)"),
    ("store_kv", "k_scale", f"k_scale {_SCALE}"),
    ("store_kv", "v_scale", f"v_scale {_SCALE}"),
    ("paged_decode", "k_scale", f"k_scale {_SCALE}"),
    ("paged_decode", "v_scale", f"v_scale {_SCALE}"),
    ("extend_attention", "k_scale", f"k_scale {_SCALE}"),
    ("extend_attention", "v_scale", f"v_scale {_SCALE}"),
    ("extend_attention", "plan", "an extend plan entry naming no query tile of the batch (skipped), "
     "or a plan whose entry count is not the batch's tile count"),
)

STATUS_WORDS = 3

_bufs: dict[torch.device, torch.Tensor] = {}


@dataclass(frozen=True)
class KernelFault:
    """One recorded fault: which op met which bad input. ``str()`` says what was done about it."""

    op: str
    check: str

    def __str__(self) -> str:
        extra = {(o, c): w for o, c, w in EXTRA_CHECKS}
        what = extra.get((self.op, self.check)) or dict(CHECKS)[self.check]
        return f"{self.op}: {self.check}: {what}"


def _key(device: Optional[torch.device]) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def buffer(device: torch.device) -> torch.Tensor:
    """The status buffer of ``device`` (int32 ``[STATUS_WORDS]``, zeroed when made)."""
    dev = _key(device)
    buf = _bufs.get(dev)
    if buf is None:
        # A normal tensor even when first made under torch.inference_mode (engines run there),
        # so take_errors can clear it outside that mode too.
        with torch.inference_mode(False):
            buf = torch.zeros(STATUS_WORDS, dtype=torch.int32, device=dev)
        _bufs[dev] = buf
    return buf


def record(device: torch.device, op: str, checks: int) -> None:
    """Host-side report (the reference ops): OR ``checks`` (CHECK_BIT values) into ``op``'s byte."""
    if not checks:
        return
    buf = buffer(device)
    word = (int(buf[0].item()) & 0xFFFFFFFF) | (checks << (8 * OPS.index(op)))
    buf[0] = word - (1 << 32) if word >= 1 << 31 else word


def record_extra(device: torch.device, op: str, check: str) -> None:
    """Host-side report of the EXTRA_CHECKS entry ``(op, check)`` (word 2)."""
    bit = 1 << [(o, c) for o, c, _ in EXTRA_CHECKS].index((op, check))
    buf = buffer(device)
    buf[2] = int(buf[2].item()) | bit


def decode_faults(word: int) -> list[KernelFault]:
    """The faults set in a status word 0 value."""
    word &= 0xFFFFFFFF
    out = []
    for o, op in enumerate(OPS):
        for c, (check, _) in enumerate(CHECKS):
            if word >> (8 * o + c) & 1:
                out.append(KernelFault(op, check))
    return out


def _take(device: Optional[torch.device], word: int) -> int:
    dev = _key(device)
    buf = _bufs.get(dev)
    if buf is None:
        return 0
    # Copy, then clear, in stream order: faults of ops enqueued before this call are in the copy,
    # those of later ops land in the cleared word.
    val = buf[word].clone()
    buf[word].zero_()
    return int(val.item()) & 0xFFFFFFFF  # synchronises


def take_errors(device: Optional[torch.device] = None) -> list[KernelFault]:
    """Faults the ops on ``device`` (default: the current GPU, else the CPU) recorded since the last
    call, and clear them. Synchronises with the device. An empty list means every input the kernels
    read was in range."""
    word0 = _take(device, 0)
    extra = _take(device, 2)
    return decode_faults(word0) + [KernelFault(op, c) for i, (op, c, _) in enumerate(EXTRA_CHECKS)
                                   if extra >> i & 1]


def take_kernel_log(device: Optional[torch.device] = None) -> set[str]:
    """Kernels that ran on ``device`` since the last call, as recorded by the kernels themselves
    (decode: ``"mma"``, ``"mma_narrow"``, ``"cuda_core"``, and ``"mma_8warp"`` beside the matrix
    kernel's name when long FP8 units ran its 8-warp shape; extend: ``"extend"``, and ``"extend_ws"``
    for the warp-specialised kernel of sm_90a); clears the record. Synchronises."""
    word = _take(device, 1)
    return {name for i, name in enumerate(KERNELS) if word >> i & 1}
