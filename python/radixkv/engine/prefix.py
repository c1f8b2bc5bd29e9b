"""Single-branch requests on the radix prefix cache (``RadixCache`` over a page-1 ``TokenPool``).

The lifecycle SGLang uses: match and lock the cached prefix (capped one token short of the prompt,
so at least one token is computed and yields logits), allocate slots for the rest as they are
needed (evicting LRU leaves when the pool is short), publish each finished prefill chunk to the
tree so other requests can share it while this one still runs, and on finish insert every token
that has KV, free the slots that turned out to be duplicates, and unlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import radixkv as rk
from radixkv.engine.request import I32, Request


@dataclass
class RadixSeq:
    req: Request
    tokens: list[int]  # prompt, then output tokens as they are sampled
    node: Any  # the locked radix node; the cache owns slots[:locked_len]
    slots: I32  # KV slot of every position < kv_len (and the ones allocated for this step)
    kv_len: int  # positions whose KV is written
    cached_len: int  # prefix hit at admission (prefill tokens saved)
    locked_len: int
    reserve_left: int  # slots still promised to this sequence by admission control
    output: list[int] = field(default_factory=list)
    logits: list[Any] = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return int(self.req.prompt.size)

    @property
    def prefilling(self) -> bool:
        return self.kv_len < self.prompt_len


def common_prefix_len(a: I32, b: I32) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PrefixManager:
    """Owns the page-1 slot pool and the radix tree over it, plus admission control.

    Admission reserves each sequence's worst case (prompt + max_new_tokens - 1 slots) against
    ``available + evictable``, so a running sequence never finds the pool empty mid-decode;
    eviction only ever drops unlocked cache, never a running request's KV.
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots < 2:
            raise rk.InvalidArgument(f"pool_tokens must be >= 2, got {num_slots}")
        self.num_slots = num_slots
        self.pool = rk.TokenPool(num_slots)
        self.cache = rk.RadixCache(self.pool)
        self.reserved = 0
        self.evicted_tokens = 0
        self.duplicate_slots_freed = 0

    @staticmethod
    def worst_case(req: Request) -> int:
        # The last sampled token never gets KV written.
        return int(req.prompt.size) + req.params.max_new_tokens - 1

    def check_fits(self, req: Request) -> None:
        if self.worst_case(req) > self.num_slots:
            raise rk.InvalidArgument(
                f"request {req.rid} needs up to {self.worst_case(req)} KV slots "
                f"(prompt {req.prompt.size} + max_new_tokens {req.params.max_new_tokens} - 1) "
                f"but the pool has {self.num_slots}"
            )

    def hit_length(self, req: Request) -> int:
        """Read-only: how much of the prompt the cache would serve now (for queue ordering)."""
        return int(self.cache.peek_prefix(req.prompt[:-1], req.namespace))

    def can_admit(self, req: Request, hit: int) -> bool:
        # Locking the hit path may move up to `hit` tokens from evictable to protected.
        capacity = int(self.pool.available) + int(self.cache.evictable_size) - hit - self.reserved
        return self.worst_case(req) - hit <= capacity

    def admit(self, req: Request) -> RadixSeq:
        m = self.cache.match_prefix(req.prompt[:-1], req.namespace)
        self.cache.lock(m.node)
        reserve = self.worst_case(req) - int(m.length)
        self.reserved += reserve
        return RadixSeq(
            req=req,
            tokens=req.prompt.tolist(),
            node=m.node,
            slots=np.asarray(m.slots, dtype=np.int32).copy(),
            kv_len=int(m.length),
            cached_len=int(m.length),
            locked_len=int(m.length),
            reserve_left=reserve,
        )

    def alloc(self, seq: RadixSeq, n: int) -> I32:
        """Slots for the next ``n`` positions of ``seq``, evicting LRU cache if the pool is short."""
        short = n - self.pool.available
        if short > 0:
            self.evicted_tokens += int(self.cache.evict(short))
        new = np.asarray(self.pool.alloc(n), dtype=np.int32)
        seq.slots = np.concatenate([seq.slots[: seq.kv_len], new])
        seq.reserve_left -= n
        self.reserved -= n
        return new

    def _insert(self, seq: RadixSeq) -> None:
        k = int(self.cache.insert(seq.tokens[: seq.kv_len], seq.slots[: seq.kv_len],
                                  seq.req.namespace))
        if k > seq.locked_len:
            # Another request published these tokens first: keep the tree's copy, free ours.
            self.pool.free(seq.slots[seq.locked_len : k])
            self.duplicate_slots_freed += k - seq.locked_len

    def publish(self, seq: RadixSeq) -> None:
        """Put the KV written so far into the tree, and move the lock to the new path end."""
        self._insert(seq)
        m = self.cache.match_prefix(seq.tokens[: seq.kv_len], seq.req.namespace)
        if int(m.length) != seq.kv_len:
            raise rk.InvariantViolation(
                f"request {seq.req.rid}: published {seq.kv_len} tokens but matched {m.length}"
            )
        self.cache.lock(m.node)
        self.cache.unlock(seq.node)
        seq.node = m.node
        seq.slots = np.asarray(m.slots, dtype=np.int32).copy()
        seq.locked_len = seq.kv_len

    def finish(self, seq: RadixSeq) -> None:
        self._insert(seq)
        self.cache.unlock(seq.node)
        self.reserved -= seq.reserve_left
        seq.reserve_left = 0
