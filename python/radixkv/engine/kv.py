"""The KV pool tensors (one K and one V per layer, bshd ``[num_pages, page_size, H_kv, D]``) and
the per-step attention that writes into them and reads from them through ``radixkv.ops``.

The pool's element type is the model's dtype (``kv_dtype="auto"``) or FP8 (``"fp8"`` =
``"fp8_e4m3"``: ``torch.float8_e4m3fn``; ``"fp8_e5m2"``): half the bytes of a 16-bit cache per
token. An FP8 pool carries one float32 ``k_scale`` and ``v_scale`` per layer (shape ``[]``, stored
value x scale = real value), device tensors that every ``store_kv`` / ``paged_decode`` /
``extend_attention`` call reads on the device, so CUDA graphs capture them as they capture the
caches. They come from the checkpoint when it stores them (``model.layers.{i}.self_attn.k_scale``
/ ``v_scale``, or ``kv_scale`` for both: vLLM / llm-compressor naming, per tensor or ``[H_kv]``;
``checkpoint.kv_scales``), else they are 1.0 (vLLM's default without calibrated scales): e4m3
then keeps magnitudes up to 448 with 3 mantissa bits, and values below 2^-6 as subnormals (less
precise). Nothing here calibrates them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional, Sequence

import torch

import radixkv as rk
from radixkv.engine.model import ModelConfig
from radixkv.metadata import DecodeMetadata, ExtendMetadata

# --kv-dtype values; "auto" is the model's dtype.
KV_DTYPES: dict[str, Optional[torch.dtype]] = {
    "auto": None,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The pool's element type for ``kv_dtype`` ``name`` (``InvalidArgument`` naming the choices
    for anything else)."""
    if not isinstance(name, str) or name not in KV_DTYPES:
        raise rk.InvalidArgument(
            f"kv_dtype {name!r} is not one of {', '.join(KV_DTYPES)} (auto: the model's dtype)")
    dtype = KV_DTYPES[name]
    return model_dtype if dtype is None else dtype


def kv_dtype_name(dtype: torch.dtype) -> str:
    """``float8_e4m3fn``, ``bfloat16``, ...: how reports name a cache dtype."""
    return str(dtype).replace("torch.", "")


def pool_tokens_for_bytes(config: ModelConfig, nbytes: int, page_size: int,
                          cache_dtype: torch.dtype) -> int:
    """The most tokens, in whole pages, whose K and V (every layer) fit in ``nbytes`` at
    ``cache_dtype``: an FP8 pool holds twice the tokens of a 16-bit one in the same bytes."""
    per_page = config.kv_bytes_per_token(cache_dtype) * page_size
    return int(nbytes) // per_page * page_size


def select_ops(device: torch.device) -> ModuleType:
    """The kernels on a GPU; the pure-torch reference ops on the CPU."""
    if device.type == "cpu":
        from radixkv.ops import reference

        return reference
    import radixkv.ops

    return radixkv.ops


def _checked_scales(scales: Sequence[tuple[torch.Tensor, torch.Tensor]], config: ModelConfig
                    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``scales`` as the pool's ops take them: one ``(k, v)`` per layer, each float32-convertible of
    shape ``[]`` or ``[H_kv]``, finite and > 0 (read on the host, once); ``InvalidArgument`` else."""
    if len(scales) != config.num_layers:
        raise rk.InvalidArgument(f"KV scales for {len(scales)} layers, the model has "
                                 f"{config.num_layers}")
    out = []
    for layer, pair in enumerate(scales):
        checked = []
        for name, s in zip(("k_scale", "v_scale"), pair):
            if not isinstance(s, torch.Tensor) or tuple(s.shape) not in ((), (config.num_kv_heads,)):
                raise rk.InvalidArgument(f"layer {layer} {name} must be a tensor of shape [] or "
                                         f"[{config.num_kv_heads}], got {getattr(s, 'shape', s)!r}")
            f = s.detach().to("cpu", torch.float32)
            if not bool((torch.isfinite(f) & (f > 0)).all()):
                raise rk.InvalidArgument(f"layer {layer} {name} must be finite and > 0, got "
                                         f"{f.tolist()}")
            checked.append(f)
        out.append((checked[0], checked[1]))
    return out


class KVPool:
    """``k[layer]``, ``v[layer]``: ``[num_pages, page_size, H_kv, D]`` of ``dtype`` (the model's
    dtype or an FP8 type); FP8 pools add ``k_scale[layer]`` / ``v_scale[layer]``, float32 ``[]``
    or ``[H_kv]`` on ``device``: ``scales`` (per layer ``(k_scale, v_scale)``, e.g. a checkpoint's,
    ``model.kv_scales``) or 1.0. A 16-bit pool ignores ``scales``. ``scale_source`` says which."""

    def __init__(self, config: ModelConfig, num_pages: int, page_size: int, device: torch.device,
                 dtype: torch.dtype,
                 scales: Optional[Sequence[tuple[torch.Tensor, torch.Tensor]]] = None) -> None:
        shape = (num_pages, page_size, config.num_kv_heads, config.head_dim)
        self.num_pages = num_pages
        self.page_size = page_size
        self.dtype = dtype
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.bytes_per_token = config.kv_bytes_per_token(dtype)
        self.fp8 = dtype in FP8
        n = config.num_layers if self.fp8 else 0
        self.scale_source = "1.0" if n == 0 or scales is None else "checkpoint"
        if n and scales is not None:
            pairs = _checked_scales(scales, config)
            self.k_scale = [k.to(device, torch.float32).clone() for k, _ in pairs]
            self.v_scale = [v.to(device, torch.float32).clone() for _, v in pairs]
        else:
            self.k_scale = [torch.ones((), device=device, dtype=torch.float32) for _ in range(n)]
            self.v_scale = [torch.ones((), device=device, dtype=torch.float32) for _ in range(n)]
        # The keyword arguments each layer's ops take: none for a 16-bit pool.
        self._scales: list[dict[str, torch.Tensor]] = [
            {"k_scale": k, "v_scale": v} for k, v in zip(self.k_scale, self.v_scale)
        ] if self.fp8 else [{} for _ in range(config.num_layers)]

    def scales(self, layer: int) -> dict[str, torch.Tensor]:
        """``{"k_scale": ..., "v_scale": ...}`` of ``layer`` for an FP8 pool, else ``{}``."""
        return self._scales[layer]

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def nbytes(self) -> int:
        return self.num_slots * self.bytes_per_token

    def copy_pages(self, ops: ModuleType, pairs: torch.Tensor) -> None:
        """Copy-on-write: ``pairs`` int32 ``[k, 2]`` (src, dst) pages, every layer."""
        for k, v in zip(self.k, self.v):
            ops.copy_blocks(k, v, pairs)


class StepAttention:
    """``attend(layer, q, k, v)`` for the model's forward over one step's rows: the first
    ``num_extend_rows`` are prefill chunks (extend attention), the rest decodes (paged decode).
    Each part stores its new K/V first."""

    def __init__(self, pool: KVPool, ops: ModuleType, extend: Optional[ExtendMetadata[torch.Tensor]],
                 decode: Optional[DecodeMetadata[torch.Tensor]], num_extend_rows: int) -> None:
        self.pool = pool
        self.ops = ops
        self.extend = extend
        self.decode = decode
        self.split = num_extend_rows
        self.max_q = extend.max_extend_len if extend is not None else 0
        self.max_kv = extend.max_seq_len if extend is not None else 0

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.pool.k[layer], self.pool.v[layer]
        sc = self.pool.scales(layer)  # FP8 pools: k_scale / v_scale
        ops, s = self.ops, self.split
        e, d = self.extend, self.decode
        if e is not None and d is None:
            ops.store_kv(kc, vc, k, v, e.out_cache_loc, **sc)
            return ops.extend_attention(q, kc, vc, e.qo_indptr, e.kv_indptr, e.kv_indices,
                                        e.seq_lens, **self._bounds(), **sc)
        if d is not None and e is None:
            ops.store_kv(kc, vc, k, v, d.out_cache_loc, **sc)
            return ops.paged_decode(q, kc, vc, d.kv_indptr, d.kv_indices, d.seq_lens,
                                    **self._plan(), **sc)
        assert e is not None and d is not None
        out = torch.empty_like(q)
        ops.store_kv(kc, vc, k[:s], v[:s], e.out_cache_loc, **sc)
        ops.store_kv(kc, vc, k[s:], v[s:], d.out_cache_loc, **sc)
        out[:s] = ops.extend_attention(q[:s], kc, vc, e.qo_indptr, e.kv_indptr, e.kv_indices,
                                       e.seq_lens, **self._bounds(), **sc)
        out[s:] = ops.paged_decode(q[s:], kc, vc, d.kv_indptr, d.kv_indices, d.seq_lens,
                                   **self._plan(), **sc)
        return out

    def _plan(self) -> dict[str, Any]:
        # The work plan rides in the decode metadata (built with plan_slots on a GPU), so the op
        # does not read the lengths back to plan it.
        plan = self.decode.decode_plan if self.decode is not None else None
        return {"plan": plan} if plan is not None else {}

    def _bounds(self) -> dict[str, Any]:
        # The public ops take them (grid sizing without reading qo_indptr; the kernel for short
        # contexts; the extend plan, built with the metadata on a GPU); the reference does not.
        if self.ops.__name__ != "radixkv.ops":
            return {}
        out: dict[str, Any] = {"max_q_len": self.max_q, "max_kv_len": self.max_kv}
        e = self.extend
        if e is not None and e.extend_plan is not None and e.plan_tile_rows is not None:
            out["plan"] = self.ops.ExtendPlan(e.extend_plan, e.plan_tile_rows)
        return out
