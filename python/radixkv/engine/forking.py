"""Parallel sampling (``n > 1``) on a paged pool through ``BlockAllocator``.

The prompt is prefilled once into the parent sequence's blocks; then the parent is forked into
``n - 1`` children, which share every prompt block (ref counts, zero bytes copied). When a branch
appends into a block that is still shared, the allocator hands it a fresh block and returns the
(src, dst) copy that the engine performs with ``ops.copy_blocks`` before attention runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import radixkv as rk
from radixkv.engine.request import I32, Request


@dataclass
class Branch:
    group: ForkGroup
    index: int
    seq_id: int
    tokens: list[int]
    kv_len: int
    output: list[int] = field(default_factory=list)
    logits: list[Any] = field(default_factory=list)
    done: bool = False


@dataclass
class ForkGroup:
    req: Request
    parent_id: int
    kv_len: int = 0  # prompt positions prefilled so far (before the fork)
    branches: list[Branch] = field(default_factory=list)
    reserved_blocks: int = 0

    @property
    def prompt_len(self) -> int:
        return int(self.req.prompt.size)

    @property
    def prefilling(self) -> bool:
        return not self.branches


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ForkManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise rk.InvalidArgument(
                f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.blocks = rk.BlockAllocator(num_blocks, block_size)
        self.reserved = 0
        self._next_seq = 0
        self.forks = 0
        self.cow_copies = 0

    def worst_blocks(self, req: Request) -> int:
        """Blocks a group can hold at its peak: the full prompt blocks once, and per branch every
        block from the prompt's partial last block on (that one is copied on write)."""
        bs = self.block_size
        p, m, n = int(req.prompt.size), req.params.max_new_tokens, req.params.n
        shared = p // bs
        return shared + n * (_ceil_div(p + m - 1, bs) - shared)

    def check_fits(self, req: Request) -> None:
        if self.worst_blocks(req) > self.num_blocks:
            raise rk.InvalidArgument(
                f"request {req.rid} (n={req.params.n}) needs up to {self.worst_blocks(req)} blocks "
                f"of {self.block_size} but the paged pool has {self.num_blocks}"
            )

    def can_admit(self, req: Request) -> bool:
        return self.reserved + self.worst_blocks(req) <= self.num_blocks

    def _new_seq(self) -> int:
        self._next_seq += 1
        return self._next_seq

    def admit(self, req: Request) -> ForkGroup:
        group = ForkGroup(req=req, parent_id=self._new_seq(), reserved_blocks=self.worst_blocks(req))
        self.reserved += group.reserved_blocks
        return group

    def extend_prompt(self, group: ForkGroup, n: int) -> I32:
        """Map ``n`` more prompt positions of the parent; return their physical slots."""
        if group.kv_len == 0:
            self.blocks.allocate(group.parent_id, n)
        else:
            copies = self.blocks.append_slots(group.parent_id, n)
            if len(copies):
                raise rk.InvariantViolation(f"unforked parent {group.parent_id} got copies {copies}")
        start = group.kv_len
        return np.asarray(self.blocks.slot_mapping(group.parent_id, start, start + n), np.int32)

    def fork(self, group: ForkGroup) -> None:
        """Branch 0 keeps the parent's sequence; branches 1..n-1 are forks of it."""
        ids = [group.parent_id]
        for _ in range(1, group.req.params.n):
            child = self._new_seq()
            self.blocks.fork(group.parent_id, child)
            self.forks += 1
            ids.append(child)
        group.branches = [
            Branch(group=group, index=i, seq_id=s, tokens=group.req.prompt.tolist(), kv_len=group.kv_len)
            for i, s in enumerate(ids)
        ]

    def append(self, branch: Branch) -> tuple[I32, list[tuple[int, int]]]:
        """One more position for ``branch``: its slot, and any copy-on-write block copies."""
        copies = [(int(s), int(d)) for s, d in self.blocks.append_slots(branch.seq_id, 1)]
        self.cow_copies += len(copies)
        pos = branch.kv_len
        return np.asarray(self.blocks.slot_mapping(branch.seq_id, pos, pos + 1), np.int32), copies

    def pages(self, seq_id: int, kv_len: int) -> I32:
        table = np.asarray(self.blocks.block_tables([seq_id]), dtype=np.int32)
        return table[0, : _ceil_div(kv_len, self.block_size)].copy()

    def release(self, branch: Branch) -> None:
        self.blocks.free(branch.seq_id)
        branch.done = True
        group = branch.group
        if all(b.done for b in group.branches):
            self.reserved -= group.reserved_blocks
            group.reserved_blocks = 0

    def blocks_in_use(self) -> int:
        return self.num_blocks - int(self.blocks.num_free_blocks)
