"""The public op wrappers: validate, pick a backend, call it.

Validation is split in two. Checks every backend needs (ranks, dtypes, matching shapes, devices,
GQA divisibility, index dtypes) always run and raise :class:`radixkv.InvalidArgument`. Checks of
what the compiled kernels support (head_dim, page_size) run only on the extension path, since the
reference handles any size. Nothing here reads GPU memory, so the wrappers never synchronise and
are safe inside CUDA-graph capture. Index ranges are checked on the device, always: the kernels
clamp or skip bad metadata and record each fault in a per-device status word (``_status``), which
:func:`radixkv.ops.take_errors` reads. Set ``RADIXKV_OPS_CHECK=1`` to also verify index ranges on
the host before each op and raise on any fault the op recorded (both synchronise).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, NamedTuple, NoReturn, Optional

import numpy as np
import torch

from radixkv import InvalidArgument
from radixkv.ops import _fp8, _status, reference

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
SUPPORTED_KV_DTYPES = SUPPORTED_DTYPES + reference.FP8_DTYPES  # caches; q and new K/V: 16-bit
SUPPORTED_HEAD_DIMS = (64, 128, 256)
SUPPORTED_PAGE_SIZES = (1, 16, 64)
_LAYOUT_CODE = {"bshd": 0, "bhsd": 1}

_warned_reference = False
_workspaces: dict[torch.device, torch.Tensor] = {}
_counter_bufs: dict[torch.device, torch.Tensor] = {}
_num_sms: dict[int, int] = {}


# ----------------------------------------------------------------------------- backend choice


def _extension_ready(strict: bool) -> bool:
    from radixkv.ops import loader

    try:
        loader.load()
        return True
    except Exception as exc:  # noqa: BLE001 - any build failure means "use the reference"
        if strict:
            raise
        _warn_reference(f"the GPU extension could not be built ({exc}); using the reference ops")
        return False


def _warn_reference(msg: str) -> None:
    global _warned_reference
    if not _warned_reference:
        _warned_reference = True
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def backend(device: Optional[torch.device] = None) -> str:
    """``"extension"`` or ``"reference"``: what ops on tensors of ``device`` will run."""
    mode = os.environ.get("RADIXKV_OPS_BACKEND", "auto")
    if mode not in ("auto", "reference", "extension"):
        raise InvalidArgument(
            f"RADIXKV_OPS_BACKEND={mode!r} (supported: 'auto', 'reference', 'extension')"
        )
    if mode == "reference":
        return "reference"
    dev = device if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type != "cuda":
        if mode == "extension":
            raise InvalidArgument(f"RADIXKV_OPS_BACKEND=extension needs GPU tensors, got {dev}")
        _warn_reference("radixkv.ops: tensors are not on a GPU; using the pure-torch reference ops")
        return "reference"
    return "extension" if _extension_ready(strict=(mode == "extension")) else "reference"


# ----------------------------------------------------------------------------- validation


def _fail(msg: str) -> NoReturn:
    raise InvalidArgument(msg)


def _check_layout(layout: str) -> int:
    if layout not in _LAYOUT_CODE:
        _fail(f"unsupported layout: {layout!r} (supported: 'bshd', 'bhsd')")
    return _LAYOUT_CODE[layout]


def _check_caches(k_cache: torch.Tensor, v_cache: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(c).__name__}")
        if c.dim() != 4:
            _fail(f"{name} must be 4-D ({layout}), got shape {tuple(c.shape)}")
        if c.dtype not in SUPPORTED_KV_DTYPES + (torch.float32,):
            _fail(f"unsupported {name} dtype: {c.dtype} (supported: float16, bfloat16, "
                  "float8_e4m3fn, float8_e5m2)")
        if c.stride(-1) != 1:
            _fail(f"{name} must have a contiguous last (head_dim) axis, got strides {c.stride()}")
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        _fail(
            f"k_cache and v_cache must match: {tuple(k_cache.shape)}/{k_cache.dtype} vs "
            f"{tuple(v_cache.shape)}/{v_cache.dtype}"
        )
    if k_cache.device != v_cache.device:
        _fail(f"k_cache on {k_cache.device} but v_cache on {v_cache.device}")
    return reference.cache_dims(k_cache, layout)


def _check_index(name: str, t: Optional[torch.Tensor], dim: int, device: torch.device) -> None:
    if t is None:
        _fail(f"{name} is required")
    assert t is not None
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        _fail(f"{name} must be int32, got {t.dtype}")
    if t.dim() != dim:
        _fail(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    if t.device != device:
        _fail(f"{name} is on {t.device} but the caches are on {device}")


def _check_kernel_sizes(head_dim: int, page_size: int, dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        _fail(f"unsupported dtype for the GPU kernels: {dtype} (supported: float16, bfloat16)")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        _fail(f"unsupported head_dim: {head_dim} (supported: 64, 128, 256)")
    if page_size not in SUPPORTED_PAGE_SIZES:
        _fail(f"unsupported page_size: {page_size} (supported: 1, 16, 64)")


def _check_pages(
    name: str,
    batch: int,
    kv_indptr: Optional[torch.Tensor],
    kv_indices: Optional[torch.Tensor],
    kv_lens: Optional[torch.Tensor],
    block_tables: Optional[torch.Tensor],
    device: torch.device,
) -> None:
    _check_index("kv_lens", kv_lens, 1, device)
    assert kv_lens is not None
    if kv_lens.numel() != batch:
        _fail(f"{name}: kv_lens has {kv_lens.numel()} entries for a batch of {batch}")
    if block_tables is not None:
        if kv_indptr is not None or kv_indices is not None:
            _fail(f"{name}: pass either block_tables= or kv_indptr/kv_indices, not both")
        _check_index("block_tables", block_tables, 2, device)
        if block_tables.shape[0] != batch:
            _fail(f"{name}: block_tables has {block_tables.shape[0]} rows for a batch of {batch}")
    else:
        _check_index("kv_indptr", kv_indptr, 1, device)
        _check_index("kv_indices", kv_indices, 1, device)
        assert kv_indptr is not None
        if kv_indptr.numel() != batch + 1:
            _fail(f"{name}: kv_indptr has {kv_indptr.numel()} entries, expected batch + 1 = {batch + 1}")


def check_extend_metadata(
    qo_indptr: torch.Tensor,
    kv_lens: torch.Tensor,
    num_q_tokens: int,
    max_q_len: Optional[int] = None,
    max_kv_len: Optional[int] = None,
) -> None:
    """Host-side checks of extend metadata (reads the tensors: synchronises with the GPU).

    Raises :class:`radixkv.InvalidArgument` naming the first offending request.
    """
    qo = qo_indptr.detach().to("cpu", torch.int64)
    lk = kv_lens.detach().to("cpu", torch.int64)
    if qo.numel() == 0:
        _fail("qo_indptr must have at least one entry (B + 1 for B requests)")
    if lk.numel() != qo.numel() - 1:
        _fail(f"kv_lens has {lk.numel()} entries, qo_indptr {qo.numel()} (expected B, B + 1)")
    if int(qo[0]) != 0:
        _fail(f"qo_indptr must start at 0, got {int(qo[0])}")
    lq = qo[1:] - qo[:-1]
    if (lq < 0).any():
        b = int((lq < 0).nonzero()[0])
        _fail(f"qo_indptr decreases at request {b}: {int(qo[b])} -> {int(qo[b + 1])}")
    if int(qo[-1]) != num_q_tokens:
        _fail(f"qo_indptr ends at {int(qo[-1])} but q has {num_q_tokens} rows")
    if (lk < 0).any():
        b = int((lk < 0).nonzero()[0])
        _fail(f"kv_lens[{b}] = {int(lk[b])} is negative")
    bad = lq > lk
    if bad.any():
        b = int(bad.nonzero()[0])
        _fail(
            f"request {b} has more queries than keys: L_q = {int(lq[b])} > L_k = kv_lens[{b}] = "
            f"{int(lk[b])} (the keys must include the new tokens: L_k = prefix + L_q)"
        )
    if max_q_len is not None and lq.numel() and int(lq.max()) > int(max_q_len):
        _fail(f"max_q_len = {max_q_len} but a request has L_q = {int(lq.max())}")
    if max_kv_len is not None and lk.numel() and int(lk.max()) > int(max_kv_len):
        b = int((lk > int(max_kv_len)).nonzero()[0])
        _fail(f"max_kv_len = {max_kv_len} but kv_lens[{b}] = {int(lk[b])}")


def _check_query(
    q: torch.Tensor, shape: str, k_cache: torch.Tensor, h_kv: int, dim: int
) -> tuple[int, int]:
    """Checks q against the caches (3-D, head_dim, dtype, device, GQA divisibility);
    returns its first dimension and H_q."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        _fail(f"q must be {shape}, got {tuple(getattr(q, 'shape', ()))}")
    rows, h_q, qdim = q.shape
    if qdim != dim:
        _fail(f"q head_dim {qdim} differs from the cache's {dim}")
    if _fp8.is_fp8(k_cache.dtype):
        if q.dtype not in SUPPORTED_DTYPES + (torch.float32,):
            _fail(f"q dtype {q.dtype} with an FP8 cache (supported: float16, bfloat16)")
    elif q.dtype != k_cache.dtype:
        _fail(f"q dtype {q.dtype} differs from the cache's {k_cache.dtype}")
    if q.device != k_cache.device:
        _fail(f"q is on {q.device} but the caches are on {k_cache.device}")
    if h_q % h_kv != 0:
        _fail(f"H_q ({h_q}) must be a multiple of H_kv ({h_kv})")
    return int(rows), int(h_q)


def _host_check_pages(
    num_pages: int,
    page_size: int,
    kv_indptr: Optional[torch.Tensor],
    kv_indices: Optional[torch.Tensor],
    kv_lens: torch.Tensor,
    block_tables: Optional[torch.Tensor],
) -> None:
    """Opt-in (RADIXKV_OPS_CHECK=1) host-side range checks; synchronises with the GPU."""
    lens = kv_lens.cpu().long()
    if (lens < 0).any():
        _fail(f"kv_lens has negative entries: {lens[lens < 0][:4].tolist()}")
    need = (lens + page_size - 1) // page_size
    if block_tables is not None:
        have = torch.full_like(need, block_tables.shape[1])
        pages = block_tables.cpu().long()
        used = torch.arange(pages.shape[1]).unsqueeze(0) < need.clamp(max=pages.shape[1]).unsqueeze(1)
        pages = pages[used]
    else:
        assert kv_indptr is not None and kv_indices is not None
        ind = kv_indptr.cpu().long()
        have = ind[1:] - ind[:-1]
        if (have < 0).any() or int(ind[-1]) > kv_indices.numel():
            _fail(f"kv_indptr is not a valid CSR row pointer over {kv_indices.numel()} indices")
        pages = kv_indices.cpu().long()[: int(ind[-1])]
    short = need > have
    if short.any():
        b = int(short.nonzero()[0])
        _fail(f"request {b}: kv_lens {int(lens[b])} needs {int(need[b])} pages, has {int(have[b])}")
    if pages.numel() and (int(pages.min()) < 0 or int(pages.max()) >= num_pages):
        _fail(f"page index out of range [0, {num_pages}): min {int(pages.min())}, max {int(pages.max())}")


def _call(op: Any, *args: Any) -> None:
    """Call a compiled op; its "unsupported" errors (a variant left out of this build, a value the
    C++ checks reject) become radixkv.InvalidArgument."""
    try:
        op(*args)
    except (ValueError, RuntimeError) as exc:
        if "radixkv:" in str(exc) and ("unsupported" in str(exc) or isinstance(exc, ValueError)):
            raise InvalidArgument(str(exc).split("\n")[0]) from exc
        raise


def _scale(sm_scale: Optional[float], head_dim: int) -> float:
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float(sm_scale)
    if not (math.isfinite(scale) and scale > 0.0):
        _fail(f"sm_scale must be finite and > 0, got {sm_scale!r}")
    return scale


def _checked() -> bool:
    return os.environ.get("RADIXKV_OPS_CHECK") == "1"


def _raise_recorded(device: torch.device) -> None:
    """Checked mode, after an op: raise if any op on ``device`` recorded an input fault."""
    faults = _status.take_errors(device)
    if faults:
        _fail("bad kernel input (recorded on the device): " + "; ".join(str(f) for f in faults))


# paged_decode(kernel=...): the binding's kernel codes (hip/paged_decode.h, PagedDecodeParams.kernel).
_KERNEL_CODE = {"auto": 0, "mma": 1, "cuda_core": 2}


# ----------------------------------------------------------------------------- decode work plan


def _sm_count(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _num_sms:
        _num_sms[idx] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return _num_sms[idx]


# Query heads one block of the matrix-unit decode kernel serves (the M of its MMA tiles).
_MMA_ROWS = 16
_has_mfma: dict[int, bool] = {}


def _head_chunk(group: int) -> int:
    """Query heads one CUDA-core decode block serves (divides the GQA group; paged_decode_kernel.cuh,
    run_cuda_cores: at most 2 on AMD, 8 on NVIDIA)."""
    for c in ((2, 1) if torch.version.hip is not None else (8, 4, 2, 1)):
        if group % c == 0:
            return c
    return 1


def _matrix_kernel(device: torch.device, kernel: str = "auto") -> bool:
    """Whether paged_decode runs the matrix-unit kernel here (hip/paged_decode_kernel.cuh, run_any):
    NVIDIA and AMD parts with MFMA do unless ``kernel="cuda_core"``; gfx906-class parts run the
    CUDA-core one."""
    if kernel == "cuda_core":
        return False
    if torch.version.hip is None:
        return True
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _has_mfma:
        arch = str(getattr(torch.cuda.get_device_properties(idx), "gcnArchName", ""))
        _has_mfma[idx] = arch.startswith(("gfx90a", "gfx94"))
    return _has_mfma[idx]


def _mma_head_chunks(h_q: int, h_kv: int) -> int:
    """Blocks per (unit, KV head) of the matrix-unit decode kernel: the GQA group in chunks of
    _MMA_ROWS query heads (paged_decode_mma.cuh, head_chunks)."""
    return -(-(h_q // max(h_kv, 1)) // _MMA_ROWS)


def decode_slots(h_q: int, h_kv: int, device: Optional[torch.device] = None,
                 kernel: str = "auto") -> int:
    """Work units of a decode plan the GPU runs at once for this head shape: the blocks the
    device holds (SMs x blocks per SM: 1 for the matrix-unit kernel's 192 KB blocks, 4 for the
    CUDA-core kernel's 48 KB) over the blocks one unit takes (KV heads x head chunks). The plan
    builders (:func:`decode_plan`, ``build_decode_metadata(plan_slots=...)``) size the chunks
    from it; it is a property of the device and heads, not of the batch."""
    dev = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    group = h_q // max(h_kv, 1)
    if _matrix_kernel(dev, kernel):
        chunks, per_sm = _mma_head_chunks(h_q, h_kv), 1
    else:
        chunks, per_sm = group // _head_chunk(group), 4
    return max(1, _sm_count(dev) * per_sm // max(1, h_kv * chunks))


def decode_plan(kv_lens: Any, page_size: int, slots: Optional[int] = None, *,
                capacity: Optional[int] = None, num_splits: Optional[int] = None,
                device: Optional[torch.device] = None) -> torch.Tensor:
    """The decode work plan ``paged_decode(plan=...)`` reads, built on the host by the Rust core
    (``radixkv._core.build_decode_plan``; layout in hip/paged_decode.h): every request cut into
    units of about one chunk length, so that ``slots`` units (:func:`decode_slots`) keep the GPU
    busy to the end of a ragged batch. ``num_splits`` instead cuts every request into that many
    equal units (e.g. to exercise the merge). ``capacity``: unit rows (default: those used; pass
    ``radixkv._core.decode_plan_capacity(B, slots)`` for a buffer a CUDA graph can replay).
    ``kv_lens``: host lengths (a list, NumPy array or CPU tensor; a GPU tensor is read back,
    which synchronises; a negative length plans as 0). Returns int32 on ``device`` (default:
    CPU)."""
    from radixkv import _core

    kv_lens = _host_ints(kv_lens, torch.int64)
    # A negative length plans as an empty request: the kernels clamp it and record the fault.
    kv_lens = np.maximum(np.asarray(kv_lens, dtype=np.int64).reshape(-1), 0)
    if num_splits is not None:
        if not 1 <= int(num_splits) <= 256:
            _fail(f"num_splits must be in [1, 256], got {num_splits}")
        arr, _, _ = _core.build_decode_plan(kv_lens, page_size, capacity=capacity,
                                            units_per_request=int(num_splits))
    else:
        if slots is None:
            _fail("decode_plan needs slots= (see decode_slots) or num_splits=")
        arr, _, _ = _core.build_decode_plan(kv_lens, page_size, slots=int(slots), capacity=capacity)
    t = torch.from_numpy(arr)
    return t if device is None or torch.device(device).type == "cpu" else t.to(device)


def decode_counter_words(batch: int, h_q: int, h_kv: int) -> int:
    """int32 merge counters a decode needs: one per (request, KV head, 16-head chunk)."""
    return max(1, batch * h_kv * _mma_head_chunks(h_q, h_kv))


def _check_plan(plan: torch.Tensor, batch: int, device: torch.device) -> int:
    """Checks the shape of a decode plan; returns its capacity (unit rows)."""
    _check_index("plan", plan, 1, device)
    n = plan.numel()
    if n < batch or (batch > 0 and n == batch) or (n - batch) % 4 != 0:
        _fail(f"plan must be int32 [4 * capacity + B] with capacity >= 1 for B = {batch}, "
              f"got {n} elements (build it with radixkv.ops.decode_plan)")
    if not plan.is_contiguous() or plan.data_ptr() % 16 != 0:
        _fail("plan must be contiguous and start on a 16-byte boundary")
    return (n - batch) // 4


def _scratch(cache: dict[torch.device, torch.Tensor], name: str, device: torch.device, n: int,
             dtype: torch.dtype, given: Optional[torch.Tensor], zero: bool = False) -> torch.Tensor:
    """A buffer of >= ``n`` elements: the caller's ``given`` (checked: ``name`` in the error), else
    a per-device cached one, grown rarely (doubling; warm up before CUDA-graph capture or pass
    one). ``zero``: zero-filled when made (the merge counters start at zero; every decode call
    leaves them zero, so one buffer serves every shape)."""
    if given is not None:
        if (given.dtype != dtype or given.device != device or given.numel() < n
                or not given.is_contiguous()):
            _fail(
                f"{name} must be contiguous {dtype} on {device} with >= {n} elements, got "
                f"{given.dtype} on {given.device} with {given.numel()}"
            )
        return given
    buf = cache.get(device)
    if buf is None or buf.numel() < n:
        size = max(n, 2 * (buf.numel() if buf is not None else 0), 1024)
        buf = (torch.zeros if zero else torch.empty)(size, dtype=dtype, device=device)
        cache[device] = buf
    return buf


# ----------------------------------------------------------------------------- ops


def store_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
    *,
    layout: str = "bshd",
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
) -> None:
    """Write new tokens' keys and values into their slots, in place.

    k_cache, v_cache: ``[num_pages, page_size, H_kv, D]`` (bshd) or ``[num_pages, H_kv, page_size,
    D]`` (bhsd); float16, bfloat16, or FP8 (float8_e4m3fn / float8_e5m2). k, v: ``[N, H_kv, D]``,
    the cache's dtype, or float16/bfloat16 for an FP8 cache (any row strides, last axis
    contiguous). slots: int32 ``[N]``; slot s is page ``s // page_size``, offset ``s % page_size``;
    a negative slot skips its token. ``k_scale`` / ``v_scale`` (FP8 caches only, required there):
    float32 ``[]`` or ``[H_kv]`` on the caches' device; the cache stores ``value / scale`` rounded
    to nearest even and saturated (e4m3: +-448, e5m2: +-57344). Values are checked on the host
    only for CPU scales or with ``RADIXKV_OPS_CHECK=1``; otherwise a non-finite or non-positive
    scale stores NaN codes and is recorded (:func:`take_errors`: ``store_kv: k_scale``, ...).
    """
    code = _check_layout(layout)
    num_pages, page_size, heads, dim = _check_caches(k_cache, v_cache, layout)
    fp8 = _fp8.is_fp8(k_cache.dtype)
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or tuple(t.shape[1:]) != (heads, dim):
            _fail(f"{name} must be [N, {heads}, {dim}], got {tuple(getattr(t, 'shape', ()))}")
        if fp8 and t.dtype not in SUPPORTED_DTYPES + (torch.float32,):
            _fail(f"{name} dtype {t.dtype} for an FP8 cache (supported: float16, bfloat16)")
        if not fp8 and t.dtype != k_cache.dtype:
            _fail(f"{name} dtype {t.dtype} differs from the cache's {k_cache.dtype}")
        if t.device != k_cache.device:
            _fail(f"{name} is on {t.device} but the caches are on {k_cache.device}")
        if t.stride(-1) != 1:
            _fail(f"{name} must have a contiguous last axis, got strides {t.stride()}")
    if k.shape != v.shape:
        _fail(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    _check_index("slots", slots, 1, k_cache.device)
    if slots.numel() != k.shape[0]:
        _fail(f"slots has {slots.numel()} entries for {k.shape[0]} tokens")
    if k.dtype != v.dtype:
        _fail(f"k and v dtypes differ: {k.dtype} vs {v.dtype}")
    _fp8.check_scales(k_cache, heads, k_scale, v_scale, _checked())
    if _checked() and slots.numel():
        if int(slots.max()) >= num_pages * page_size:
            _fail(f"slot {int(slots.max())} out of range (pool has {num_pages * page_size} slots)")
    if backend(k_cache.device) == "reference":
        reference.store_kv(k_cache, v_cache, k, v, slots, layout, k_scale, v_scale)
    else:
        if k_cache.dtype not in SUPPORTED_KV_DTYPES or k.dtype not in SUPPORTED_DTYPES:
            _fail(f"unsupported dtype for the GPU kernels: cache {k_cache.dtype}, k/v {k.dtype} "
                  "(supported: float16, bfloat16 caches; FP8 caches from float16/bfloat16 K/V)")
        if dim % 8 != 0:
            _fail(f"unsupported head_dim for store_kv: {dim} (supported: multiples of 8)")
        if fp8:
            _call(torch.ops.radixkv.store_kv, k_cache, v_cache, k, v, slots, code,
                  _status.buffer(k_cache.device), k_scale, v_scale)
        else:
            _call(torch.ops.radixkv.store_kv, k_cache, v_cache, k, v, slots, code,
                  _status.buffer(k_cache.device))
    if _checked():
        _raise_recorded(k_cache.device)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor, pairs: torch.Tensor) -> None:
    """Copy whole pages ``pairs[i, 0] -> pairs[i, 1]`` in both caches (copy-on-write), in place.

    pairs: int32 ``[n, 2]`` (a ``[2n]`` flat tensor is accepted). Destinations must be distinct and
    must not be sources. Any layout: a page is one contiguous slab of each cache.
    """
    if not isinstance(pairs, torch.Tensor):
        _fail(f"pairs must be a torch.Tensor, got {type(pairs).__name__}")
    _check_caches(k_cache, v_cache, "bshd")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not c[0].is_contiguous() if c.shape[0] else False:
            _fail(f"{name}: each page must be contiguous, got strides {c.stride()}")
    _check_index("pairs", pairs, pairs.dim(), k_cache.device)
    if pairs.dim() == 1 and pairs.numel() % 2 == 0:
        pairs = pairs.view(-1, 2)
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        _fail(f"pairs must be int32 [n, 2], got shape {tuple(pairs.shape)}")
    if _checked() and pairs.numel():
        n = k_cache.shape[0]
        if int(pairs.min()) < 0 or int(pairs.max()) >= n:
            _fail(f"page index out of range [0, {n}) in pairs")
    if pairs.shape[0] == 0:
        return
    if backend(k_cache.device) == "reference":
        reference.copy_blocks(k_cache, v_cache, pairs)
    else:
        _call(torch.ops.radixkv.copy_blocks, k_cache, v_cache, pairs.contiguous(),
              _status.buffer(k_cache.device))
    if _checked():
        _raise_recorded(k_cache.device)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_indptr: Optional[torch.Tensor] = None,
    kv_indices: Optional[torch.Tensor] = None,
    kv_lens: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    *,
    block_tables: Optional[torch.Tensor] = None,
    layout: str = "bshd",
    out: Optional[torch.Tensor] = None,
    workspace: Optional[torch.Tensor] = None,
    counters: Optional[torch.Tensor] = None,
    plan: Optional[torch.Tensor] = None,
    num_splits: Optional[int] = None,
    kernel: str = "auto",
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decode attention: one query token per request over its paged KV context.

    q: ``[B, H_q, D]`` float16/bfloat16. Caches as in :func:`store_kv`, same dtype. Pages: CSR
    ``kv_indptr`` int32 ``[B+1]`` + ``kv_indices`` int32 ``[nnz]``, or ``block_tables=`` int32
    ``[B, max_blocks]``; ``kv_lens`` int32 ``[B]`` valid tokens per request. ``H_q`` must be a
    multiple of ``H_kv``. Returns ``[B, H_q, D]`` in q's dtype (written into ``out`` if given).
    ``plan``: the work plan (int32 on q's device, :func:`decode_plan` or the ``decode_plan`` field
    of metadata built with ``plan_slots=``): which KV range of which request each block reads,
    balanced so ragged batches keep the GPU busy. Without one, the plan is built here from
    ``kv_lens`` read back to the host (a synchronisation; pass one on a hot path or in graph
    capture). ``num_splits`` (no ``plan``): cut every request into that many units instead.
    ``workspace``: float32 scratch for the partials of requests of several units, >= capacity x
    H_q x (D + 2) elements (a per-device cached buffer by default); ``counters``: int32 merge
    counters, zero before first use and left zero by every call (at least
    :func:`decode_counter_words` elements; a per-device cached buffer by default). Calls that may
    run at the same time on different streams need their own ``workspace`` and ``counters``. Only
    a request whose plan rows agree (its ``n`` units on consecutive rows from its first unit, each
    saying ``n``) is merged through its counter, so counters are left zero whatever the plan
    holds; a request whose rows disagree is recorded as a ``plan`` fault and its output is
    undefined (other requests are unaffected).
    ``kernel``: ``"auto"`` (the device's default: matrix units where it has them), ``"cuda_core"``
    (the portable kernel gfx906-class parts run; on NVIDIA too, e.g. to test it) or ``"mma"``;
    :func:`radixkv.ops.take_kernel_log` says which ran. A request with kv_len 0 yields zeros.
    Bad page metadata is clamped or skipped on the device and recorded (:func:`take_errors`).
    FP8 caches (float8_e4m3fn / float8_e5m2) with a float16/bfloat16 q take ``k_scale`` /
    ``v_scale`` as in :func:`store_kv` and are dequantised in the kernel (half the bytes read).
    """
    if kernel not in _KERNEL_CODE:
        _fail(f"unsupported kernel: {kernel!r} (supported: {', '.join(map(repr, _KERNEL_CODE))})")
    code = _check_layout(layout)
    num_pages, page_size, h_kv, dim = _check_caches(k_cache, v_cache, layout)
    batch, h_q = _check_query(q, "[B, H_q, D]", k_cache, h_kv, dim)
    _check_pages("paged_decode", batch, kv_indptr, kv_indices, kv_lens, block_tables, q.device)
    assert kv_lens is not None
    scale = _scale(sm_scale, dim)
    if _checked():
        _host_check_pages(num_pages, page_size, kv_indptr, kv_indices, kv_lens, block_tables)
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device):
        _fail(f"out must be {tuple(q.shape)} {q.dtype} on {q.device}")
    _fp8.check_scales(k_cache, h_kv, k_scale, v_scale, _checked())
    if plan is not None and num_splits is not None:
        _fail("pass plan= or num_splits=, not both")
    if backend(q.device) == "reference":
        if plan is not None:
            _check_plan(plan, batch, q.device)
        res = reference.paged_decode(q, k_cache, v_cache, kv_indptr, kv_indices, kv_lens, scale,
                                     block_tables=block_tables, layout=layout,
                                     k_scale=k_scale, v_scale=v_scale, plan=plan)
        if _checked():
            _raise_recorded(q.device)
        if out is None:
            return res
        out.copy_(res)
        return out
    _check_kernel_sizes(dim, page_size, q.dtype)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if not out.is_contiguous():
        _fail("out must be contiguous")
    table = block_tables if block_tables is not None else kv_indices
    assert table is not None
    if plan is None:
        if torch.cuda.is_current_stream_capturing():
            _fail("paged_decode inside CUDA-graph capture needs plan= (radixkv.ops.decode_plan, "
                  "or the decode_plan field of metadata built with plan_slots): planning reads "
                  "kv_lens back to the host")
        slots = None if num_splits is not None else decode_slots(h_q, h_kv, q.device, kernel)
        plan = decode_plan(kv_lens, page_size, slots, num_splits=num_splits, device=q.device)
    capacity = _check_plan(plan, batch, q.device)
    ws = _scratch(_workspaces, "workspace", q.device, capacity * h_q * (dim + 2), torch.float32,
                  workspace)
    cnt = _scratch(_counter_bufs, "counters", q.device, decode_counter_words(batch, h_q, h_kv),
                   torch.int32, counters, zero=True)
    scale_args = (k_scale, v_scale) if _fp8.is_fp8(k_cache.dtype) else ()
    _call(torch.ops.radixkv.paged_decode,
          q.contiguous(), k_cache, v_cache, kv_indptr, table, kv_lens, out, ws, cnt, scale, code,
          plan, _status.buffer(q.device), _KERNEL_CODE[kernel], *scale_args)
    if _checked():
        _raise_recorded(q.device)
    return out


# ----------------------------------------------------------------------------- extend plan


class ExtendPlan(NamedTuple):
    """The order in which :func:`extend_attention`'s CTAs take a batch's query tiles (built on the
    host by :func:`extend_plan` or the extend metadata builders). ``tiles``: int32 ``[m, 2]`` on
    the GPU, ``(request, rank)`` per tile, rank 0 = a request's last tile; ``tile_rows``: the tile
    height it was built for (:func:`extend_tile_rows`). A plan for another height is ignored."""

    tiles: torch.Tensor
    tile_rows: int


def extend_tile_rows(head_dim: int) -> int:
    """Rows of a query tile of the extend kernels built for ``head_dim`` (a row is one query
    position of one query head): what an extend plan must be built for. Raises
    :class:`radixkv.InvalidArgument` when the kernels are not built or lack ``head_dim``."""
    from radixkv.ops import loader  # noqa: PLC0415

    try:
        loader.load()
    except (RuntimeError, OSError) as exc:
        raise InvalidArgument(f"extend_tile_rows: the extend kernels are not available here ({exc}); "
                              "pass tile_rows= to build a plan without them") from exc
    if not hasattr(torch.ops.radixkv, "extend_tile_rows"):
        _fail("extend_tile_rows: the extend kernels are not built")
    try:
        return int(torch.ops.radixkv.extend_tile_rows(int(head_dim)))
    except (ValueError, RuntimeError) as exc:
        raise InvalidArgument(str(exc).split("\n")[0]) from exc


def extend_plan(q_lens: Any, kv_lens: Any, num_q_heads: int, num_kv_heads: int, head_dim: int,
                *, device: Optional[torch.device] = None,
                tile_rows: Optional[int] = None) -> ExtendPlan:
    """The extend plan of a batch whose request b has ``q_lens[b]`` queries over ``kv_lens[b]``
    keys (new tokens included), host sequences of ints (lists, NumPy arrays or CPU tensors),
    built by the Rust core (``radixkv._core.build_extend_plan``): every query tile once, the
    heaviest first, a long request's consecutive tiles in runs that share its K/V stream. An
    engine's metadata builders produce the same array (``plan_group=``, ``plan_tile_rows=``).
    ``tile_rows``: default :func:`extend_tile_rows` of ``head_dim``. Returns an
    :class:`ExtendPlan` on ``device`` (default the current GPU); its ``tiles`` are ``[0, 2]`` for
    a batch whose requests all have the same lengths when the kernels' own order already is the
    plan's (requests of at most 512 keys, or of 16 tiles or more)."""
    from radixkv import _core  # noqa: PLC0415

    if int(num_kv_heads) < 1 or int(num_q_heads) % int(num_kv_heads) != 0:
        _fail(f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    rows = extend_tile_rows(head_dim) if tile_rows is None else int(tile_rows)
    flat = _core.build_extend_plan(_host_ints(q_lens), _host_ints(kv_lens),
                                   int(num_q_heads) // int(num_kv_heads), rows)
    dev = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    return ExtendPlan(torch.from_numpy(np.asarray(flat).reshape(-1, 2)).to(dev), rows)


def _host_ints(x: Any, dtype: torch.dtype = torch.int32) -> Any:
    """``x`` as the Rust core's host lengths: a tensor read back as a NumPy array of ``dtype`` (a
    GPU tensor synchronises); anything else (list, NumPy array) unchanged."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", dtype).numpy()
    return x


def _check_extend_plan(plan: Any, qo_indptr: torch.Tensor, group: int, device: torch.device,
                       checked: bool) -> Optional[tuple[torch.Tensor, int]]:
    """Checks an extend plan's type, shape and device (and with ``checked``, that it lists every
    query tile of the batch exactly once: reads it on the host); returns ``(tiles, tile_rows)``,
    or None for an empty plan."""
    if not isinstance(plan, ExtendPlan):
        _fail(f"plan must be a radixkv.ops.ExtendPlan (see extend_plan), got {type(plan).__name__}")
    tiles, rows = plan
    _check_index("plan.tiles", tiles, 2, device)
    if tiles.shape[1] != 2 or not tiles.is_contiguous() or tiles.data_ptr() % 8 != 0:
        _fail(f"plan.tiles must be a contiguous, 8-byte aligned int32 [m, 2] tensor, got shape "
              f"{tuple(tiles.shape)}")
    if int(rows) < 1:
        _fail(f"plan.tile_rows must be >= 1, got {rows}")
    if tiles.shape[0] == 0:
        return None
    if checked:
        qo = qo_indptr.detach().to("cpu", torch.int64)
        n_tiles = ((qo[1:] - qo[:-1]).clamp(min=0) * group + int(rows) - 1) // int(rows)
        got = tiles.detach().to("cpu", torch.int64)
        req, rank = got[:, 0], got[:, 1]
        bad = (req < 0) | (req >= n_tiles.numel()) | (rank < 0)
        if not bad.any():
            bad = rank >= n_tiles[req]
        if bad.any():
            e = int(bad.nonzero()[0])
            _fail(f"plan entry {e} = ({int(req[e])}, {int(rank[e])}) names no query tile of the batch")
        key = req * (int(n_tiles.max()) + 1) + rank
        if key.unique().numel() != key.numel() or key.numel() != int(n_tiles.sum()):
            _fail(f"plan lists {key.unique().numel()} distinct of the batch's {int(n_tiles.sum())} "
                  f"query tiles ({key.numel()} entries): every tile exactly once (built for "
                  f"tile_rows = {rows})")
    return tiles, int(rows)


def extend_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: Optional[torch.Tensor] = None,
    kv_indices: Optional[torch.Tensor] = None,
    kv_lens: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    *,
    block_tables: Optional[torch.Tensor] = None,
    layout: str = "bshd",
    out: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
    max_kv_len: Optional[int] = None,
    check: Optional[bool] = None,
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
    plan: Optional[ExtendPlan] = None,
) -> torch.Tensor:
    """Prefix-prefill ("extend") attention over paged KV with the shifted causal mask.

    q: ``[N_q, H_q, D]``; request b owns rows ``qo_indptr[b]:qo_indptr[b+1]`` (int32 ``[B+1]``),
    which are the last positions of its ``kv_lens[b]`` tokens (already written by store_kv): query
    i sees key j iff ``j <= i + L_k - L_q``. Pages and caches as in :func:`paged_decode`. Returns
    ``[N_q, H_q, D]`` in q's dtype. ``max_q_len`` (optional) bounds ``L_q`` so the kernel's grid
    can be sized without reading qo_indptr on the host; by default ``N_q`` is the bound.
    ``max_kv_len`` (optional, a host int: FlashAttention's ``max_seqlen_k``, a metadata object's
    ``max_seq_len``) bounds every ``kv_lens`` entry; it only picks the kernel (on sm_90a short
    contexts run one that fits two CTAs per SM, and 16-bit caches from 2048 keys one that steps
    over pairs of key tiles), so a value below a real length costs speed, never correctness.
    ``sm_scale`` must be finite and positive. ``check``: read the index tensors on the host and
    reject bad metadata naming the request (a request with more queries than keys, a ``qo_indptr``
    that decreases or does not end at ``N_q``, pages out of range), and raise after the op on any
    fault it recorded; default ``RADIXKV_OPS_CHECK=1``. It synchronises, so leave it off inside
    CUDA-graph capture. Unchecked, bad metadata is clamped or skipped on the device and recorded
    (:func:`take_errors`); a request with more queries than keys gets NaN rows, never garbage.
    FP8 caches (float8_e4m3fn / float8_e5m2) take ``k_scale`` / ``v_scale`` as in :func:`store_kv`
    (``check`` also checks their values); the kernel reads the FP8 pages and converts them to q's
    dtype in shared memory (exact), folding the K scale into the softmax scale and the V scale into
    the output normalisation. Unchecked, a bad scale value makes NaN rows and is recorded
    (:func:`take_errors`).
    ``plan`` (an :class:`ExtendPlan`: :func:`extend_plan`, or the ``extend_plan`` field of
    metadata built with ``plan_group=`` / ``plan_tile_rows=``): the order in which the kernel
    takes the query tiles, heaviest first across the batch, which keeps a ragged batch's GPU busy
    to the end. Built for another tile height, it is ignored; entries naming no tile are skipped
    and recorded, and ``check`` verifies that it lists every tile exactly once. The reference
    ignores it.
    """
    if max_q_len is not None and int(max_q_len) < 0:
        _fail(f"max_q_len must be >= 0, got {max_q_len}")
    if max_kv_len is not None and int(max_kv_len) < 0:
        _fail(f"max_kv_len must be >= 0, got {max_kv_len}")
    code = _check_layout(layout)
    num_pages, page_size, h_kv, dim = _check_caches(k_cache, v_cache, layout)
    n_q, h_q = _check_query(q, "[N_q, H_q, D]", k_cache, h_kv, dim)
    _check_index("qo_indptr", qo_indptr, 1, q.device)
    batch = qo_indptr.numel() - 1
    if batch < 0:
        _fail("qo_indptr must have at least one entry")
    _check_pages("extend_attention", batch, kv_indptr, kv_indices, kv_lens, block_tables, q.device)
    assert kv_lens is not None
    scale = _scale(sm_scale, dim)
    checked = _checked() if check is None else bool(check)
    _fp8.check_scales(k_cache, h_kv, k_scale, v_scale, checked)
    if checked:
        _host_check_pages(num_pages, page_size, kv_indptr, kv_indices, kv_lens, block_tables)
        check_extend_metadata(qo_indptr, kv_lens, n_q, max_q_len, max_kv_len)
    planned = None if plan is None else _check_extend_plan(plan, qo_indptr, h_q // h_kv, q.device, checked)
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device):
        _fail(f"out must be {tuple(q.shape)} {q.dtype} on {q.device}")
    if backend(q.device) == "reference" or not hasattr(torch.ops.radixkv, "extend_attention"):
        if q.device.type == "cuda" and backend(q.device) == "extension":
            _warn_reference("radixkv.ops: extend_attention kernel not built; using the reference")
        res = reference.extend_attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices,
                                         kv_lens, scale, block_tables=block_tables, layout=layout,
                                         k_scale=k_scale, v_scale=v_scale)
        if checked:
            _raise_recorded(q.device)
        if out is None:
            return res
        out.copy_(res)
        return out
    _check_kernel_sizes(dim, page_size, q.dtype)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    table = block_tables if block_tables is not None else kv_indices
    assert table is not None
    bound = n_q if max_q_len is None else int(max_q_len)
    scales = (k_scale, v_scale) if _fp8.is_fp8(k_cache.dtype) else (None, None)
    _call(torch.ops.radixkv.extend_attention,
          q.contiguous(), k_cache, v_cache, qo_indptr, kv_indptr, table, kv_lens, out, scale, code, bound,
          _status.buffer(q.device), *scales, 0 if max_kv_len is None else int(max_kv_len),
          *(planned if planned is not None else (None, 0)))
    if checked:
        _raise_recorded(q.device)
    return out
