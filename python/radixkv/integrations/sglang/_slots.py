"""Slot and token conversions at the SGLang boundary.

SGLang keeps slot ids as int64 tensors on the KV device (``req_to_token`` rows are int32);
radixkv's tree takes and returns NumPy int32 ids on the host. Everything here copies at most
once, and not at all where a CPU int32 tensor already is the NumPy array radixkv wants.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

_I32_MAX = np.iinfo(np.int32).max


def tokens_view(token_ids: Any, n: int) -> npt.NDArray[np.int64]:
    """The first ``n`` token ids as a 1-D int64 array: a view of an ``array('q')`` (what
    ``RadixKey`` and ``Req`` hold), else a converted copy."""
    if isinstance(token_ids, array) and token_ids.typecode == "q":
        return np.frombuffer(token_ids, dtype=np.int64, count=n) if n else _EMPTY_I64
    if isinstance(token_ids, torch.Tensor):
        return token_ids[:n].to("cpu", torch.int64).numpy()
    return np.asarray(token_ids[:n], dtype=np.int64)


def slots_to_host(slots: torch.Tensor) -> npt.NDArray[np.int32]:
    """A 1-D slot tensor (any integer dtype, any device) as host int32 ids.

    Zero-copy for a contiguous CPU int32 tensor (a ``req_to_token`` row on CPU)."""
    if slots.dtype != torch.int32 or slots.device.type != "cpu":
        if slots.numel() and int(slots.max()) > _I32_MAX:
            raise ValueError(
                f"radixkv (SGLang plugin): slot id {int(slots.max())} exceeds int32; "
                "this radixkv build keeps int32 slot ids"
            )
        slots = slots.to("cpu", torch.int32)
    return slots.contiguous().numpy()


def slots_to_device(slots: npt.NDArray[np.int32], device: torch.device) -> torch.Tensor:
    """Host int32 ids as the contiguous int64 tensor on ``device`` that SGLang's kernels read."""
    return torch.from_numpy(slots).to(device=device, dtype=torch.int64)


_EMPTY_I64: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
