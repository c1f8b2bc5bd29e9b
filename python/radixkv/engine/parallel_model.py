"""Tensor-parallel shards of a ``LlamaModel`` (Megatron-style, as vLLM and SGLang split Llama).

Rank ``r`` of ``N`` holds query heads ``[r Hq/N, (r+1) Hq/N)`` and their KV heads, and a slice of
the MLP's intermediate columns. The q/k/v and gate/up projections are split by output rows
(column-parallel: no communication); the output and down projections by input columns
(row-parallel): each rank's partial product is summed over the ranks with one all-reduce, then the
bias (if any) is added once. With fewer KV heads than ranks (GQA, ``Hkv < N``, ``N % Hkv == 0``)
each KV head is replicated on the ``N / Hkv`` ranks whose query heads read it, as vLLM and SGLang
do; every rank then stores one KV head per token.

The embedding is replicated (every rank needs the whole hidden state). The LM head is replicated
on the rank that samples (rank 0) and absent elsewhere (an empty ``[0, H]`` matrix: the other
ranks compute no logits).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

import radixkv as rk
from radixkv.engine.model import LayerWeights, LlamaModel, ModelConfig, Weights


@dataclass(frozen=True)
class ShardPlan:
    """What rank ``rank`` of ``world`` holds (global head and column indices)."""

    rank: int
    world: int
    q_heads: tuple[int, int]  # [lo, hi) query heads
    kv_heads: tuple[int, int]  # [lo, hi) KV heads (one replicated head when Hkv < world)
    inter: tuple[int, int]  # [lo, hi) MLP intermediate columns


def shard_plan(config: ModelConfig, rank: int, world: int) -> ShardPlan:
    """Split ``config`` over ``world`` ranks; ``InvalidArgument`` if its heads do not divide."""
    hq, hkv, inter = config.num_q_heads, config.num_kv_heads, config.intermediate_size
    if world < 1 or not 0 <= rank < world:
        raise rk.InvalidArgument(f"tensor parallel: rank {rank} of {world} ranks")
    if hq % world:
        raise rk.InvalidArgument(f"tensor parallel {world}: {hq} query heads do not split evenly")
    if hkv >= world and hkv % world:
        raise rk.InvalidArgument(f"tensor parallel {world}: {hkv} KV heads do not split evenly")
    if hkv < world and world % hkv:
        raise rk.InvalidArgument(f"tensor parallel {world}: {hkv} KV heads cannot be replicated "
                                 f"evenly (the rank count must be a multiple of the KV heads)")
    if inter < world:
        raise rk.InvalidArgument(f"tensor parallel {world}: intermediate size {inter} < ranks")
    q_per = hq // world
    if hkv >= world:
        kv_per = hkv // world
        kv = (rank * kv_per, (rank + 1) * kv_per)
    else:
        head = rank * hkv // world  # the group of this rank's query heads
        kv = (head, head + 1)
    return ShardPlan(rank, world, (rank * q_per, (rank + 1) * q_per), kv,
                     (rank * inter // world, (rank + 1) * inter // world))


def local_config(config: ModelConfig, plan: ShardPlan) -> ModelConfig:
    """The shard's config: its own head and column counts, everything else the model's."""
    return replace(config, num_q_heads=plan.q_heads[1] - plan.q_heads[0],
                   num_kv_heads=plan.kv_heads[1] - plan.kv_heads[0],
                   intermediate_size=plan.inter[1] - plan.inter[0])


def shard_weights(model: LlamaModel, plan: ShardPlan, logits: bool) -> Weights:
    """Copies (not views, so the full model can be freed) of the shard's weights."""
    c, w = model.config, model.weights
    d, i = c.head_dim, c.intermediate_size
    q = slice(plan.q_heads[0] * d, plan.q_heads[1] * d)
    k = slice(c.q_dim + plan.kv_heads[0] * d, c.q_dim + plan.kv_heads[1] * d)
    v = slice(c.q_dim + c.kv_dim + plan.kv_heads[0] * d, c.q_dim + c.kv_dim + plan.kv_heads[1] * d)
    g = slice(plan.inter[0], plan.inter[1])
    u = slice(i + plan.inter[0], i + plan.inter[1])

    def rows(t: Optional[torch.Tensor], *parts: slice) -> Optional[torch.Tensor]:
        return None if t is None else torch.cat([t[p] for p in parts]).contiguous()

    def cols(t: torch.Tensor, part: slice) -> torch.Tensor:
        return t[:, part].contiguous()

    layers = [LayerWeights(
        attn_norm=lw.attn_norm.clone(), w_qkv=rows(lw.w_qkv, q, k, v),  # type: ignore[arg-type]
        b_qkv=rows(lw.b_qkv, q, k, v), w_o=cols(lw.w_o, q),
        b_o=None if lw.b_o is None else lw.b_o.clone(), mlp_norm=lw.mlp_norm.clone(),
        w_gate_up=rows(lw.w_gate_up, g, u),  # type: ignore[arg-type]
        b_gate_up=rows(lw.b_gate_up, g, u), w_down=cols(lw.w_down, g),
        b_down=None if lw.b_down is None else lw.b_down.clone(),
    ) for lw in w.layers]
    embed = w.embed.clone()
    if logits:
        lm_head = embed if c.tie_embeddings else w.lm_head.clone()
    else:
        lm_head = w.lm_head.new_empty((0, c.hidden_size))
    return Weights(embed, layers, w.final_norm.clone(), lm_head)


class AllReduceTimer:
    """Time spent in the all-reduces (``enabled`` only): CUDA events on a GPU (read by ``drain``,
    which synchronises), wall time on the CPU (gloo all-reduces are synchronous)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = False
        self.calls = 0
        self._cpu_s = 0.0
        self._events: list[tuple[Any, Any]] = []

    def start(self) -> Any:
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            e.record()
            return e
        return time.perf_counter()

    def stop(self, token: Any) -> None:
        self.calls += 1
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            e.record()
            self._events.append((token, e))
        else:
            self._cpu_s += time.perf_counter() - token

    def drain(self) -> tuple[float, int]:
        """(seconds, all-reduce calls) since the last drain."""
        if self._events:
            torch.cuda.synchronize(self.device)
        total = self._cpu_s + sum(a.elapsed_time(b) for a, b in self._events) / 1e3
        calls = self.calls
        self._cpu_s, self._events, self.calls = 0.0, [], 0
        return total, calls


def _nothing() -> None:
    pass


class TPLlama(LlamaModel):
    """One rank's shard. ``forward`` is ``LlamaModel.forward`` with an all-reduce over ``group``
    after the output and down projections; every rank must call it with the same step."""

    def __init__(self, full_config: ModelConfig, plan: ShardPlan, weights: Weights,
                 group: Any = None) -> None:
        super().__init__(local_config(full_config, plan), weights)
        self.full_config = full_config
        self.plan = plan
        self.group = group
        self.timer = AllReduceTimer(self.device)
        self.progress: Callable[[], None] = _nothing  # called after each all-reduce

    @classmethod
    def from_model(cls, model: LlamaModel, rank: int, world: int, group: Any = None,
                   logits: Optional[bool] = None) -> TPLlama:
        """Rank ``rank``'s shard of ``model``; ``logits`` (default: rank 0) keeps the LM head."""
        plan = shard_plan(model.config, rank, world)
        w = shard_weights(model, plan, rank == 0 if logits is None else logits)
        shard = cls(model.config, plan, w, group)
        if model.kv_scales is not None:  # per-KV-head scales follow the shard's KV heads
            lo, hi = plan.kv_heads
            shard.kv_scales = [tuple(s if s.dim() == 0 else s[lo:hi].clone() for s in pair)  # type: ignore[misc]
                               for pair in model.kv_scales]
        return shard

    def _row_linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        y = F.linear(x, w)
        if self.plan.world > 1:
            t = self.timer.start() if self.timer.enabled else None
            dist.all_reduce(y, group=self.group)
            self.progress()
            if t is not None:
                self.timer.stop(t)
        return y if b is None else y + b
