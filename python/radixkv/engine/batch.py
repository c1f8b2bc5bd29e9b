"""Turn a ``StepPlan`` into the flat token batch and the attention segments of one forward.

Radix-pool work (page size 1) gets its CSR metadata from ``radixkv.build_extend_metadata`` (prefix
slots + new slots per request, built in Rust in one call). Paged-pool work lists pages, as
FlashInfer's ``kv_indices`` do, so its CSR is built here from the block tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

import radixkv as rk
from radixkv.engine.forking import Branch
from radixkv.engine.kv import KVPool, Segment
from radixkv.engine.scheduler import StepPlan, Work


@dataclass
class ForwardBatch:
    tokens: torch.Tensor  # int64 [N]
    positions: torch.Tensor  # int64 [N]
    segments: list[Segment]
    sample_works: list[Work]  # works whose last row's logits are needed, in row order
    logits_rows: torch.Tensor  # int64 [len(sample_works)]


def _i32(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)


def _indptr(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _radix_segment(works: list[Work], pool: KVPool, kind: str, start: int,
                   device: torch.device) -> Segment:
    prefix = [w.prefix_slots for w in works]
    md = rk.build_extend_metadata(prefix, [w.write_slots for w in works]).to(device)
    write = np.concatenate([w.write_slots for w in works])
    return Segment(pool, kind, start, start + write.size, _i32(write, device),
                   md.qo_indptr if kind == "extend" else None, md.kv_indptr, md.kv_indices,
                   md.seq_lens)


def _paged_segment(works: list[Work], pool: KVPool, kind: str, start: int,
                   device: torch.device, blocks: rk.BlockAllocator) -> Segment:
    write = np.concatenate([w.write_slots for w in works])
    write_t = _i32(write, device)
    end = start + write.size
    if kind == "decode":
        # The allocator knows each branch's pages and length (this step's token included).
        ids = [cast(Branch, w.target).seq_id for w in works]
        md = blocks.decode_metadata(ids).to(device)
        return Segment(pool, kind, start, end, write_t, None, md.kv_indptr, md.kv_indices,
                       md.kv_lens)
    qo = _indptr([w.tokens.size for w in works])
    kv = _indptr([w.kv_indices.size for w in works])
    return Segment(pool, kind, start, end, write_t, _i32(qo, device), _i32(kv, device),
                   _i32(np.concatenate([w.kv_indices for w in works]), device),
                   _i32(np.array([w.kv_len for w in works]), device))


def build_batch(plan: StepPlan, radix_pool: KVPool, paged_pool: KVPool, blocks: rk.BlockAllocator,
                device: torch.device) -> ForwardBatch:
    ordered: list[Work] = []
    segments: list[Segment] = []
    row = 0
    for paged in (False, True):
        for kind in ("extend", "decode"):
            works = [w for w in plan.works if w.paged == paged and w.kind == kind]
            if not works:
                continue
            if paged:
                seg = _paged_segment(works, paged_pool, kind, row, device, blocks)
            else:
                seg = _radix_segment(works, radix_pool, kind, row, device)
            segments.append(seg)
            ordered.extend(works)
            row = seg.end
    tokens = np.concatenate([w.tokens for w in ordered]).astype(np.int64)
    positions = np.concatenate([np.arange(w.start, w.start + w.tokens.size) for w in ordered])
    ends = np.cumsum([w.tokens.size for w in ordered]) - 1
    picks = [i for i, w in enumerate(ordered) if w.sample]
    return ForwardBatch(
        tokens=torch.from_numpy(tokens).to(device),
        positions=torch.from_numpy(positions.astype(np.int64)).to(device),
        segments=segments,
        sample_works=[ordered[i] for i in picks],
        logits_rows=torch.from_numpy(ends[picks].astype(np.int64)).to(device),
    )
