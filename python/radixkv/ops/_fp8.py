"""FP8 KV caches: scale validation and the kernels' KV element code (used by ``_api``).

An FP8 cache (``torch.float8_e4m3fn`` or ``torch.float8_e5m2``) holds stored values; ``k_scale`` /
``v_scale`` are float32 tensors on the cache's device of shape ``[]`` (one scale per tensor) or
``[H_kv]`` (one per KV head), and stored value x scale = real value (vLLM's convention). The
kernels read the scales on the device, so nothing here synchronises unless asked to: scale
*values* (finite, > 0) are checked on the host when they live there (CPU tensors) or in checked
mode (``check=True`` / ``RADIXKV_OPS_CHECK=1``); unchecked on a GPU, a bad scale makes the kernels
write NaN (store_kv: NaN codes; decode: NaN rows), never plausible numbers, and record it in the
status word (``radixkv.ops.take_errors``: e.g. ``paged_decode: v_scale``).
"""

from __future__ import annotations

from typing import NoReturn, Optional

import torch

from radixkv import InvalidArgument
from radixkv.ops.reference import FP8_DTYPES, dequantize

_KV_CODE = {torch.float8_e4m3fn: 1, torch.float8_e5m2: 2}


def _fail(msg: str) -> NoReturn:
    raise InvalidArgument(msg)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def check_scales(
    cache: torch.Tensor,
    h_kv: int,
    k_scale: Optional[torch.Tensor],
    v_scale: Optional[torch.Tensor],
    check_values: bool,
) -> None:
    """Reject scales of the wrong kind for ``cache`` before any kernel runs.

    Shape, dtype and device are always checked; values (finite, > 0) when ``check_values`` or
    when the scales are host tensors (reading them then costs no device sync).
    """
    if not is_fp8(cache.dtype):
        if k_scale is not None or v_scale is not None:
            _fail(f"k_scale / v_scale apply to FP8 caches only; the cache is {cache.dtype}")
        return
    if k_scale is None or v_scale is None:
        _fail(f"an FP8 cache ({cache.dtype}) needs k_scale= and v_scale= (float32, [] or [{h_kv}])")
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not isinstance(s, torch.Tensor):
            _fail(f"{name} must be a float32 torch.Tensor, got {type(s).__name__}")
        if s.dtype != torch.float32:
            _fail(f"{name} must be float32, got {s.dtype}")
        if s.device != cache.device:
            _fail(f"{name} is on {s.device} but the caches are on {cache.device}")
        if not (s.dim() == 0 or (s.dim() == 1 and s.shape[0] == h_kv)):
            _fail(f"{name} must have shape [] or [{h_kv}] (H_kv), got {list(s.shape)}")
        if s.dim() == 1 and s.stride(0) != 1:
            _fail(f"{name} must be contiguous, got stride {s.stride()}")
    assert k_scale is not None and v_scale is not None
    if k_scale.dim() != v_scale.dim():
        _fail(f"k_scale and v_scale must have the same shape, got {list(k_scale.shape)} and "
              f"{list(v_scale.shape)}")
    if check_values or cache.device.type == "cpu":
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            bad = ~(torch.isfinite(s) & (s > 0))
            if bool(bad.any()):
                first = float(s.reshape(-1)[bad.reshape(-1)][0])
                _fail(f"{name} must be finite and > 0, got {first}")


def kv_code(dtype: torch.dtype) -> int:
    """The kernels' KV element code: 0 = same 16-bit type as q, 1 = e4m3, 2 = e5m2."""
    return _KV_CODE.get(dtype, 0)


__all__ = ["check_scales", "dequantize", "is_fp8", "kv_code"]
