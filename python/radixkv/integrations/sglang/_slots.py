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

    Zero-copy for a contiguous CPU tensor (a ``req_to_token`` row on CPU)."""
    if slots.device.type != "cpu" or slots.dtype not in (torch.int32, torch.int64):
        slots = slots.to("cpu", torch.int64)
    return slots.contiguous().numpy()


def slots_to_device(slots: npt.NDArray[np.int64], device: torch.device) -> torch.Tensor:
    """Host int64 ids as the contiguous int64 tensor on ``device`` that SGLang's kernels read
    (no copy on the CPU)."""
    t = torch.from_numpy(slots)
    if device.type == "cpu" and t.dtype == torch.int64:
        return t
    return t.to(device=device, dtype=torch.int64)


_EMPTY_I64: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
I64 = np.dtype(np.int64)
_frombuffer = np.frombuffer


class RowReader:
    """Slot ids of ``req_to_token`` rows as host ids radixkv takes as they are.

    A CPU table (int32 or int64, contiguous) is read through NumPy views of its rows, made once
    per table object: a row is then a list item, with no torch or NumPy indexing per call.
    Any other table goes through ``slots_to_host`` (one copy of the part asked for)."""

    def __init__(self) -> None:
        self._table: Any = None
        self._rows: Optional[List[npt.NDArray[np.signedinteger]]] = None

    @property
    def views_table(self) -> bool:
        """Whether the last call's result is a view of the table itself (a CPU table): writes
        into it then land in the table, with no torch indexing in between."""
        return self._rows is not None

    def _see(self, table: torch.Tensor) -> None:
        self._table = table
        self._rows = (
            list(table.numpy())
            if table.device.type == "cpu"
            and table.dtype in (torch.int32, torch.int64)
            and table.is_contiguous()
            and table.dim() == 2
            else None
        )

    def __call__(self, table: torch.Tensor, row: int, n: int) -> npt.NDArray[np.signedinteger]:
        """``row``'s ids, at least its first ``n``: the whole row of a CPU table (a view, no
        slicing), else a copy of the first ``n``. For calls that cut to a length of their own
        (``RadixCache.checkpoint(..., length=n)``)."""
        if table is not self._table:
            self._see(table)
        if self._rows is not None:
            return self._rows[row]
        return slots_to_host(table[row, :n])
