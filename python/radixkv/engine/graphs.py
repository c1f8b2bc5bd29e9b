"""CUDA graphs of decode-only steps, one per batch-size bucket.

A bucket of ``B`` rows owns one static int32 device buffer laid out as ``DecodeLayout`` says:
token ids, positions, the CSR page list (``kv_indptr`` ``[B+1]``, ``kv_indices`` of a fixed
capacity), ``seq_lens`` (the ops' ``kv_lens``), the slots the new K/V go to, the rows' sampling
parameters and room for copy-on-write pairs. The engine packs a step straight into that layout in its pinned staging
buffer, so the step's one host-to-device copy fills the graph's inputs. Rows past the real batch
are padding: ``kv_len`` 0 (paged_decode yields zeros) and slot -1 (store_kv skips them). The
work plan of paged_decode (``plan``) is part of the layout: a fixed capacity per bucket
(``decode_plan_capacity``), refilled each step by the Rust planner from the step's lengths; its
workspace and merge counters are the engine's own buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional

import numpy as np
import torch

from radixkv.engine.kv import KVPool

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)
_ALIGN = 16


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class DecodeLayout:
    batch: int
    capacity: int  # kv_indices entries
    tok: int
    pos: int
    indptr: int
    lens: int
    write: int
    temps: int
    lo: int
    hi: int
    copies: int  # 2 * batch int32 words: (src, dst) page pairs
    plan: int  # paged_decode's work plan: 4 * plan_capacity + batch words
    indices: int
    size: int
    plan_capacity: int = 0  # unit rows (0: no plan, the reference ops)

    @staticmethod
    def make(batch: int, capacity: int, plan_capacity: int = 0) -> DecodeLayout:
        at = 0
        offs = []
        plan_words = 4 * plan_capacity + batch if plan_capacity else 0
        for n in (batch, batch, batch + 1, batch, batch, batch, batch, batch, 2 * batch,
                  plan_words, capacity):
            offs.append(at)
            at += _aligned(n)
        return DecodeLayout(batch, capacity, *offs, size=at, plan_capacity=plan_capacity)

    @property
    def plan_words(self) -> int:
        return 4 * self.plan_capacity + self.batch if self.plan_capacity else 0


class _Graph:
    def __init__(self, layout: DecodeLayout, static: torch.Tensor) -> None:
        self.layout = layout
        self.static = static
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.logits: Optional[torch.Tensor] = None


class DecodeAttention:
    """``attend`` for a decode step over fixed-size inputs (graph-capturable: no host reads)."""

    def __init__(self, pool: KVPool, ops: ModuleType, indptr: torch.Tensor, indices: torch.Tensor,
                 lens: torch.Tensor, write: torch.Tensor, workspace: Optional[torch.Tensor],
                 counters: Optional[torch.Tensor], plan: Optional[torch.Tensor],
                 live: Optional[int] = None) -> None:
        self.pool, self.ops = pool, ops
        self.indptr, self.indices, self.lens, self.write = indptr, indices, lens, write
        self.workspace, self.counters, self.plan = workspace, counters, plan
        self.live = live  # eager emulation only: rows past it are padding, left zero

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.pool.k[layer], self.pool.v[layer]
        sc = self.pool.scales(layer)  # FP8 pools: device scale tensors, captured like the caches
        self.ops.store_kv(kc, vc, k, v, self.write, **sc)
        if self.plan is None:  # the reference ops (CPU): no work plan, no empty rows
            n = q.shape[0] if self.live is None else self.live
            out = torch.zeros_like(q)
            out[:n] = self.ops.paged_decode(q[:n], kc, vc, self.indptr[: n + 1], self.indices,
                                            self.lens[:n], **sc)
            return out
        return self.ops.paged_decode(q, kc, vc, self.indptr, self.indices, self.lens,
                                     workspace=self.workspace, counters=self.counters,
                                     plan=self.plan, **sc)


class DecodeGraphs:
    """Captures lazily (or all at once through ``capture_all``) and replays decode steps."""

    def __init__(self, forward: Callable[..., torch.Tensor], pool: KVPool, ops: ModuleType,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, max_batch: int,
                 max_pages_per_seq: int, device: torch.device) -> None:
        self.forward = forward
        self.pool, self.ops, self.device = pool, ops, device
        if max_batch >= BUCKETS[-1]:
            self.buckets = list(BUCKETS)
        else:
            top = min(b for b in BUCKETS if b >= max_batch)
            self.buckets = [b for b in BUCKETS if b <= top]
        self.max_pages_per_seq = max_pages_per_seq
        self.hq, self.hkv, self.dim = num_q_heads, num_kv_heads, head_dim
        # On the CPU (or with the reference ops) the same static layouts run eagerly.
        self.eager = device.type != "cuda" or not hasattr(ops, "decode_plan")
        self.slots: Optional[int] = None  # work units paged_decode runs at once (its plan's size)
        self.workspace: Optional[torch.Tensor] = None
        self.counters: Optional[torch.Tensor] = None
        if not self.eager:
            from radixkv import _core

            self.slots = int(ops.decode_slots(num_q_heads, num_kv_heads, device))
            top = self.buckets[-1]
            ws = max(_core.decode_plan_capacity(b, self.slots) for b in self.buckets) \
                * num_q_heads * (head_dim + 2)
            self.workspace = torch.empty(max(ws, 1), dtype=torch.float32, device=device)
            self.counters = torch.zeros(ops.decode_counter_words(top, num_q_heads, num_kv_heads),
                                        dtype=torch.int32, device=device)
        self.graphs: dict[int, _Graph] = {}
        self.mempool: Any = None
        self.disabled: Optional[str] = None  # why graphs are off, if they are
        self.replays = 0

    def bucket(self, batch: int, pages: int) -> Optional[_Graph]:
        """The graph for ``batch`` rows listing ``pages`` pages in all, capturing it if needed;
        None when no bucket fits (or graphs are disabled)."""
        if self.disabled is not None or batch > self.buckets[-1]:
            return None
        b = next(x for x in self.buckets if x >= batch)
        g = self.graphs.get(b)
        if g is None:
            g = self._capture(b)
            if g is None:
                return None
        return g if pages <= g.layout.capacity else None

    def capture_all(self) -> None:
        for b in reversed(self.buckets):  # largest first: the smaller ones reuse its memory
            if b not in self.graphs and self._capture(b) is None:
                return

    def _run(self, g: _Graph, live: Optional[int] = None) -> torch.Tensor:
        lay, st = g.layout, g.static
        b = lay.batch
        attend = DecodeAttention(
            self.pool, self.ops, st.narrow(0, lay.indptr, b + 1), st.narrow(0, lay.indices, lay.capacity),
            st.narrow(0, lay.lens, b), st.narrow(0, lay.write, b), self.workspace, self.counters,
            st.narrow(0, lay.plan, lay.plan_words) if lay.plan_capacity else None, live)
        return self.forward(st.narrow(0, lay.tok, b).long(), st.narrow(0, lay.pos, b).long(), attend, None)

    def _capture(self, b: int) -> Optional[_Graph]:
        capacity = b * self.max_pages_per_seq
        if self.slots is not None:
            from radixkv import _core

            lay = DecodeLayout.make(b, capacity, _core.decode_plan_capacity(b, self.slots))
        else:
            lay = DecodeLayout.make(b, capacity)
        static = torch.zeros(lay.size, dtype=torch.int32, device=self.device)
        static.narrow(0, lay.write, b).fill_(-1)  # padding rows write nothing
        if lay.plan_capacity:  # a valid plan of empty requests until the first step packs one
            static.narrow(0, lay.plan, lay.plan_words).copy_(torch.from_numpy(self.plan_for(lay, [])))
        g = _Graph(lay, static)
        if self.eager:
            self.graphs[b] = g
            return g
        try:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream), torch.inference_mode():
                # Warm-up, refusing any host synchronisation: a graph cannot contain one.
                torch.cuda.set_sync_debug_mode("error")
                try:
                    self._run(g)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            torch.cuda.current_stream(self.device).wait_stream(stream)
            if self.mempool is None:
                self.mempool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(graph, pool=self.mempool):
                g.logits = self._run(g)
            g.graph = graph
        except Exception as exc:  # noqa: BLE001 - any capture failure: run decode steps eagerly
            self.disabled = f"bucket {b}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            return None
        self.graphs[b] = g
        return g

    def plan_for(self, lay: DecodeLayout, seq_lens: Any) -> np.ndarray:
        """The work plan of a step with ``seq_lens`` (rows past them: empty) at ``lay``'s fixed
        capacity, built by the Rust planner."""
        from radixkv import _core

        lens = np.zeros(lay.batch, np.int64)
        lens[: len(seq_lens)] = seq_lens
        assert self.slots is not None
        plan, _, _ = _core.build_decode_plan(lens, self.pool_page_size(), slots=self.slots,
                                             capacity=lay.plan_capacity)
        return plan

    def pool_page_size(self) -> int:
        return int(self.pool.page_size)

    def replay(self, g: _Graph, live: int) -> torch.Tensor:
        """Logits ``[bucket, V]`` of the step packed into ``g.static`` (``live`` real rows)."""
        if self.eager:
            self.replays += 1
            with torch.inference_mode():
                return self._run(g, live)
        assert g.graph is not None and g.logits is not None
        g.graph.replay()
        self.replays += 1
        return g.logits


def pack_decode(out: np.ndarray, lay: DecodeLayout, tokens: np.ndarray, positions: np.ndarray,
                kv_indptr: np.ndarray, kv_indices: np.ndarray, seq_lens: np.ndarray,
                write: np.ndarray, temps: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                copies: np.ndarray, plan: Optional[np.ndarray] = None) -> int:
    """Write one decode step into ``out`` in ``lay``'s layout (padding the rows past the batch);
    returns how many int32 words to copy. ``kv_indices`` is copied only as far as it is used."""
    n, b = tokens.size, lay.batch
    out[: lay.indices] = 0
    out[lay.tok : lay.tok + n] = tokens
    out[lay.pos : lay.pos + n] = positions
    out[lay.indptr : lay.indptr + n + 1] = kv_indptr
    out[lay.indptr + n + 1 : lay.indptr + b + 1] = kv_indptr[-1]
    out[lay.lens : lay.lens + n] = seq_lens
    out[lay.write : lay.write + b] = -1
    out[lay.write : lay.write + n] = write
    out[lay.temps : lay.temps + n] = temps.view(np.int32)
    out[lay.lo : lay.lo + n] = lo
    out[lay.hi : lay.hi + n] = hi
    out[lay.copies : lay.copies + copies.size] = copies
    if plan is not None:
        out[lay.plan : lay.plan + plan.size] = plan
    out[lay.indices : lay.indices + kv_indices.size] = kv_indices
    return lay.indices + int(kv_indices.size)
