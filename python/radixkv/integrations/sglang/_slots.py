"""Slot and token conversions at the SGLang boundary.

SGLang keeps slot ids as int64 tensors on the KV device (``req_to_token`` rows are int32);
radixkv's tree (built with ``slot_dtype="int64"``) takes int32 or int64 NumPy ids and returns
int64 ones on the host. Everything here copies at most
once, and not at all where a CPU int32 tensor already is the NumPy array radixkv wants.
"""

from __future__ import annotations

from array import array
from typing import Any, List, Optional

import numpy as np
import numpy.typing as npt
import torch

def tokens_view(token_ids: Any, n: int) -> npt.NDArray[np.int64]:
    """The first ``n`` token ids as a 1-D int64 array: a view of an ``array('q')`` (what
    ``RadixKey`` and ``Req`` hold), else a converted copy."""
    if type(token_ids) is array and token_ids.typecode == "q":
        # positional, with a dtype object: half the cost of dtype=np.int64, count=n
        return _frombuffer(token_ids, I64, n) if n else _EMPTY_I64
    if isinstance(token_ids, torch.Tensor):
        return token_ids[:n].to("cpu", torch.int64).numpy()
    return np.asarray(token_ids[:n], dtype=np.int64)


def slots_to_host(slots: torch.Tensor) -> npt.NDArray[np.signedinteger]:
    """A 1-D slot tensor (int32 or int64, any device) as host ids radixkv takes as they are.

    Zero-copy for a contiguous CPU tensor (a ``req_to_token`` row on CPU); a GPU row of int32
    or int64 ids is copied as it is (converting on the way would cost a kernel launch)."""
    if slots.dtype not in (torch.int32, torch.int64) and not slots.dtype.is_floating_point:
        slots = slots.to(torch.int64)  # narrower integers; floats go on, for radixkv to refuse
    if slots.device.type != "cpu":
        slots = slots.cpu()
    return slots.contiguous().numpy()


def host_to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor's copy on a GPU ``device``, queued on the current stream without the host
    waiting for that stream: staged through page-locked memory from PyTorch's pinned-memory
    cache, which holds the stage until the copy has run. A copy from pageable memory would
    wait for every kernel already queued (a forward pass in flight) before returning."""
    return host.pin_memory().to(device, non_blocking=True)


def slots_to_device(slots: npt.NDArray[np.signedinteger], device: torch.device) -> torch.Tensor:
    """Host ids as the contiguous int64 tensor on ``device`` that SGLang's kernels read (no
    copy for int64 ids on the CPU; on a GPU through ``host_to_device``)."""
    t = torch.from_numpy(slots)
    if t.dtype != torch.int64:
        t = t.to(torch.int64)
    if device.type == "cpu":
        return t
    return host_to_device(t, device)


_EMPTY_I64: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
I64 = np.dtype(np.int64)
_frombuffer = np.frombuffer


def row_views(table: torch.Tensor) -> Optional[List[npt.NDArray[np.signedinteger]]]:
    """NumPy views of every row of a CPU table (int32 or int64, contiguous, 2-D), made once per
    table object by the caller: a row is then a list item, with no torch or NumPy indexing per
    call, and writes into it land in the table. None for any other table (see ``row_copy``)."""
    if (
        table.device.type == "cpu"
        and table.dtype in (torch.int32, torch.int64)
        and table.is_contiguous()
        and table.dim() == 2
    ):
        return list(table.numpy())
    return None


def row_copy(table: torch.Tensor, row: int, n: int) -> npt.NDArray[np.signedinteger]:
    """The first ``n`` ids of ``row`` of a table ``row_views`` does not view, on the host."""
    return slots_to_host(table[row, :n])
