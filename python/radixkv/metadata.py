"""Batch metadata: the int32 arrays attention kernels read, as built by the Rust core.

Every builder (:func:`radixkv.build_extend_metadata`, :func:`radixkv.build_decode_metadata`,
:func:`radixkv.build_block_table_metadata`, ``BlockAllocator.decode_metadata`` /
``block_table_metadata``) fills **one** contiguous int32 buffer in Rust and hands it to NumPy
without a copy. Each field (``qo_indptr``, ``kv_indices``, ...) is a view of that buffer, starting
on a 64-byte boundary. :meth:`BatchMetadata.to` therefore moves a whole batch to a device with a
single host-to-device copy, and the device fields are views (``narrow``) of the one device buffer.

One name per quantity: ``seq_lens[b]`` is the number of tokens of request ``b`` whose K/V the
kernels read (L_k: cached prefix, new tokens and, in decode, the token being decoded), in every kind
of metadata; it is what the ops take as their ``kv_lens`` argument. ``kv_lens`` on a metadata object
is a deprecated alias of ``seq_lens`` (it warns), kept for code written against 0.1.

torch is imported only by :meth:`BatchMetadata.to`, so ``import radixkv`` works without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import warnings
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, Union

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

    Device = Union[str, torch.device, int]

__all__ = ["BatchMetadata", "BlockTableMetadata", "DecodeMetadata", "ExtendMetadata"]

#: The array type of the fields: NumPy on the host, torch after ``.to(device)``.
ArrayT = TypeVar("ArrayT")

#: ``(name, offset, shape)`` of each field inside the buffer, in int32 elements.
FieldLayout = tuple[str, int, tuple[int, ...]]

_M = TypeVar("_M", bound="BatchMetadata[Any]")

#: Deprecated field names and the field each one reads.
_DEPRECATED_FIELDS = {"kv_lens": "seq_lens"}


def _warn_deprecated(old: str) -> None:
    new = _DEPRECATED_FIELDS[old]
    warnings.warn(
        f"metadata field {old!r} is a deprecated alias of {new!r} (the same array); use {new!r}",
        DeprecationWarning,
        stacklevel=3,
    )


def _view(buffer: Any, offset: int, shape: tuple[int, ...]) -> Any:
    if len(shape) == 1:
        if isinstance(buffer, np.ndarray):
            return buffer[offset : offset + shape[0]]
        return buffer.narrow(0, offset, shape[0])
    numel = 1
    for s in shape:
        numel *= s
    if isinstance(buffer, np.ndarray):
        return buffer[offset : offset + numel].reshape(shape)
    return buffer.narrow(0, offset, numel).view(shape)


class BatchMetadata(Generic[ArrayT]):
    """Named int32 fields that are views of one buffer, plus host-side integer maxima.

    ``buffer`` is the whole allocation (NumPy int32 1-D, or a torch int32 tensor after
    :meth:`to`). ``scalars`` holds host integers such as ``max_seq_len`` that kernels take as
    launch parameters, so they never need reading back from the device.
    """

    __slots__ = ("_fields", "_host", "_layout", "buffer", "scalars")

    def __init__(
        self,
        buffer: ArrayT,
        layout: Sequence[FieldLayout],
        scalars: Mapping[str, int],
    ) -> None:
        self.buffer: ArrayT = buffer
        # The core hands over (str, int, tuple) triples already; views are made once, here.
        self._layout = tuple(layout)
        self.scalars: dict[str, int] = dict(scalars)
        self._fields: dict[str, ArrayT] = {
            name: _view(buffer, off, shape) for name, off, shape in self._layout
        }
        # After .to(device): the host buffer the copy came from, kept alive with the result.
        self._host: Any = None

    def field(self, name: str) -> ArrayT:
        """The field called ``name`` (``KeyError`` if this kind of metadata has none). A
        deprecated name (``kv_lens``) warns and gives the field it stands for."""
        if name not in self._fields and name in _DEPRECATED_FIELDS:
            _warn_deprecated(name)
            name = _DEPRECATED_FIELDS[name]
        return self._fields[name]

    def fields(self) -> dict[str, ArrayT]:
        """All fields by name, in buffer order."""
        return dict(self._fields)

    @property
    def batch_size(self) -> int:
        return self.scalars["batch_size"]

    @property
    def max_seq_len(self) -> int:
        return self.scalars["max_seq_len"]

    @property
    def seq_lens(self) -> ArrayT:
        """int32 ``[n]``: tokens of each request whose K/V attention reads (L_k); the ops'
        ``kv_lens`` argument."""
        return self._fields["seq_lens"]

    @property
    def kv_lens(self) -> ArrayT:
        """Deprecated alias of :attr:`seq_lens` (warns)."""
        _warn_deprecated("kv_lens")
        return self._fields["seq_lens"]

    def _to(self: _M, device: Device, non_blocking: bool) -> _M:
        import torch

        buf = self.buffer
        host = torch.from_numpy(buf) if isinstance(buf, np.ndarray) else buf
        # One copy of the whole batch; the new object's fields are views of it.
        moved = host.to(device, non_blocking=non_blocking)
        out = type(self)(moved, self._layout, self.scalars)
        # A non-blocking copy may still read the host buffer after this returns.
        out._host = buf
        return out

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}{list(s)}" for n, _, s in self._layout)
        return f"{type(self).__name__}({shapes}; {self.scalars})"


class ExtendMetadata(BatchMetadata[ArrayT]):
    """Metadata of an extend (prefix-prefill) batch of ``n`` requests (docs/contract.md §3).

    Built over slots by :func:`radixkv.build_extend_metadata` (``page_size`` 1), or over pages by
    :func:`radixkv.build_paged_extend_metadata` / ``BlockAllocator.extend_metadata``; then
    ``kv_indptr`` / ``kv_indices`` count and list pages, as FlashInfer's paged prefill does.

    ============================ ======= =====================================================
    field                        shape   value
    ============================ ======= =====================================================
    ``qo_indptr``                [n+1]   ``[0, cumsum(extend_seq_lens)]``
    ``kv_indptr``                [n+1]   ``[0, cumsum(seq_lens)]``
    ``seq_lens``                 [n]     prefix + new tokens (L_k)
    ``extend_seq_lens``          [n]     new tokens (L_q)
    ``extend_prefix_lens``       [n]     cached prefix tokens
    ``extend_start_loc``         [n]     ``qo_indptr[:-1]``
    ``kv_last_page_len``         [n]     ``(seq_lens - 1) % page_size + 1`` (1 over slots)
    ``kv_indices``               [K]     per request: prefix slots, then new slots (or pages)
    ``out_cache_loc``            [Q]     new slots, concatenated (where ``store_kv`` writes)
    ``positions``                [Q]     positions of the new tokens (``prefix_len..seq_len``)
    ============================ ======= =====================================================

    Scalars: ``batch_size``, ``num_tokens`` (Q), ``page_size``, ``max_seq_len``,
    ``max_extend_len``, ``max_prefix_len``, ``max_pages``. Built with ``plan_group`` and
    ``plan_tile_rows``, also ``extend_plan`` ``[m, 2]`` and the scalar ``plan_tile_rows``.
    """

    __slots__ = ()

    @property
    def qo_indptr(self) -> ArrayT:
        return self._fields["qo_indptr"]

    @property
    def extend_plan(self) -> Optional[ArrayT]:
        """int32 ``[m, 2]``: the extend plan (``extend_attention(plan=...)``, with
        ``plan_tile_rows``), present when the builder was given ``plan_group`` and
        ``plan_tile_rows``; else None. ``m`` = 0 for a batch whose requests all have the same
        lengths when the kernels' own order already is the plan's (see
        ``radixkv._core.build_extend_plan``)."""
        return self._fields.get("extend_plan")

    @property
    def plan_tile_rows(self) -> Optional[int]:
        """The tile height the extend plan was built for, or None without a plan."""
        return self.scalars.get("plan_tile_rows")

    @property
    def kv_indptr(self) -> ArrayT:
        return self._fields["kv_indptr"]

    @property
    def kv_indices(self) -> ArrayT:
        return self._fields["kv_indices"]

    @property
    def extend_seq_lens(self) -> ArrayT:
        return self._fields["extend_seq_lens"]

    @property
    def extend_prefix_lens(self) -> ArrayT:
        return self._fields["extend_prefix_lens"]

    @property
    def extend_start_loc(self) -> ArrayT:
        return self._fields["extend_start_loc"]

    @property
    def kv_last_page_len(self) -> ArrayT:
        return self._fields["kv_last_page_len"]

    @property
    def page_size(self) -> int:
        return self.scalars["page_size"]

    @property
    def out_cache_loc(self) -> ArrayT:
        return self._fields["out_cache_loc"]

    @property
    def positions(self) -> ArrayT:
        return self._fields["positions"]

    @property
    def num_tokens(self) -> int:
        return self.scalars["num_tokens"]

    @property
    def max_extend_len(self) -> int:
        return self.scalars["max_extend_len"]

    @property
    def max_prefix_len(self) -> int:
        return self.scalars["max_prefix_len"]

    def to(self, device: Device, *, non_blocking: bool = False) -> ExtendMetadata[torch.Tensor]:
        """The same fields as torch int32 tensors on ``device``, through one copy."""
        return self._to(device, non_blocking)  # type: ignore[return-value]


class DecodeMetadata(BatchMetadata[ArrayT]):
    """CSR metadata of a decode batch (one query per request), FlashInfer's form.

    With ``page_size == 1`` the indices are slots; otherwise they are pages and the last page of
    request ``b`` holds ``kv_last_page_len[b] = (seq_lens[b] - 1) % page_size + 1`` tokens.

    ====================== ======= =============================================
    field                  shape   value
    ====================== ======= =============================================
    ``qo_indptr``          [n+1]   ``0..n`` (one query each)
    ``kv_indptr``          [n+1]   ``[0, cumsum(pages per request)]``
    ``kv_indices``         [P]     the pages (slots) of request 0, then 1, ...
    ``seq_lens``           [n]     valid tokens per request (the ops' ``kv_lens``)
    ``kv_last_page_len``   [n]     tokens in each request's last page
    ``out_cache_loc``      [n]     slot of each request's last token (its K/V)
    ====================== ======= =============================================

    Scalars: ``batch_size``, ``page_size``, ``max_seq_len``, ``max_pages``.
    """

    __slots__ = ()

    @property
    def qo_indptr(self) -> ArrayT:
        return self._fields["qo_indptr"]

    @property
    def kv_indptr(self) -> ArrayT:
        return self._fields["kv_indptr"]

    @property
    def kv_indices(self) -> ArrayT:
        return self._fields["kv_indices"]

    @property
    def kv_last_page_len(self) -> ArrayT:
        return self._fields["kv_last_page_len"]

    @property
    def out_cache_loc(self) -> ArrayT:
        """Slot of each request's last token: where this step's K/V is written."""
        return self._fields["out_cache_loc"]

    @property
    def page_size(self) -> int:
        return self.scalars["page_size"]

    @property
    def decode_plan(self) -> Optional[ArrayT]:
        """int32 ``[4 * capacity + n]``: the decode work plan (``paged_decode(plan=...)``), present
        when the builder was given ``plan_slots``; else None. Scalars ``plan_units``,
        ``plan_capacity``, ``plan_chunk`` come with it."""
        return self._fields.get("decode_plan")

    def to(self, device: Device, *, non_blocking: bool = False) -> DecodeMetadata[torch.Tensor]:
        """The same fields as torch int32 tensors on ``device``, through one copy."""
        return self._to(device, non_blocking)  # type: ignore[return-value]


class BlockTableMetadata(BatchMetadata[ArrayT]):
    """Block-table metadata of a decode batch, vLLM's form.

    ====================== ============ ===========================================
    field                  shape        value
    ====================== ============ ===========================================
    ``block_tables``       [n, width]   physical blocks per sequence, 0-padded
    ``seq_lens``           [n]          valid tokens per sequence
    ``kv_last_page_len``   [n]          ``(seq_lens - 1) % page_size + 1``
    ``out_cache_loc``      [n]          slot of each sequence's last token
    ====================== ============ ===========================================

    ``width`` is the longest table unless a fixed one was asked for (e.g. for CUDA graphs).
    Scalars: ``batch_size``, ``page_size``, ``max_seq_len``, ``max_blocks`` (= width).
    """

    __slots__ = ()

    @property
    def block_tables(self) -> ArrayT:
        return self._fields["block_tables"]

    @property
    def decode_plan(self) -> Optional[ArrayT]:
        """int32 ``[4 * capacity + n]``: the decode work plan (``paged_decode(plan=...)``), present
        when the builder was given ``plan_slots``; else None. Scalars ``plan_units``,
        ``plan_capacity``, ``plan_chunk`` come with it."""
        return self._fields.get("decode_plan")

    @property
    def kv_last_page_len(self) -> ArrayT:
        return self._fields["kv_last_page_len"]

    @property
    def page_size(self) -> int:
        return self.scalars["page_size"]

    @property
    def out_cache_loc(self) -> ArrayT:
        """Slot of each request's last token: where this step's K/V is written."""
        return self._fields["out_cache_loc"]

    @property
    def max_blocks(self) -> int:
        return self.scalars["max_blocks"]

    def to(
        self, device: Device, *, non_blocking: bool = False
    ) -> BlockTableMetadata[torch.Tensor]:
        """The same fields as torch int32 tensors on ``device``, through one copy."""
        return self._to(device, non_blocking)  # type: ignore[return-value]


#: The NumPy form every builder returns.
Int32Array = npt.NDArray[np.int32]
