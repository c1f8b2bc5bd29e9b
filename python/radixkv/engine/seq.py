"""A running (or waiting) sequence and the request group it belongs to.

Every sequence lives on the one paged KV pool. ``pages[i]`` holds positions
``i * page_size .. (i + 1) * page_size - 1``; the first ``locked_len // page_size`` pages belong
to the radix cache (reached through the locked ``node``), the rest (including a partial last page)
are the sequence's own. A request with ``n > 1`` is prefilled once as its group's parent sequence;
at the end of the prompt it becomes ``n`` branch sequences that share the prompt's full pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from radixkv.engine.request import I32, Request


@dataclass
class Group:
    """What one request's sequences share: its outputs, one per branch, and its timings."""

    req: Request
    submit_s: float
    outputs: list[list[int]] = field(default_factory=list)
    logits: list[list[Any]] = field(default_factory=list)
    first_s: list[float] = field(default_factory=list)  # per branch: first token's time
    last_s: list[float] = field(default_factory=list)  # per branch: its last token's time (at finish)
    branches_left: int = 0
    cached_len: int = 0  # prompt tokens served by the cache at first admission
    preemptions: int = 0


@dataclass
class Seq:
    group: Group
    branch: Optional[int]  # None: the parent of an n > 1 group, before the fork
    tokens: list[int]  # prompt, then this branch's sampled tokens
    namespace: Any
    _buf: I32 = field(default_factory=lambda: np.zeros(16, np.int32), repr=False)
    _view: I32 = field(default_factory=lambda: np.zeros(0, np.int32), repr=False)  # _buf[:npages]
    npages: int = 0
    kv_len: int = 0  # positions whose KV is written
    node: Any = None  # locked radix node (None while waiting)
    locked_len: int = 0
    target: int = 0  # prefill up to here (all tokens at admission), then decode
    order: int = 0  # admission order; preemption takes the newest first
    reserved_pages: int = 0  # contiguous admission: pages promised up front
    preemptions: int = 0
    computed: int = 0  # high-water mark of kv_len: positions below it were computed before
    fork_pages: I32 = field(default_factory=lambda: np.zeros(0, np.int32))  # see KVManager.fork

    def __post_init__(self) -> None:
        p = self.group.req.params
        self.out = self.group.outputs[self.branch or 0]  # this branch's output list
        self.temperature = p.temperature
        self.max_new = p.max_new_tokens

    @property
    def pages(self) -> I32:
        """int32 page ids of positions ``0 .. npages * page_size`` (a view, kept between calls:
        the decode step reads every running sequence's pages)."""
        return self._view

    @pages.setter
    def pages(self, value: I32) -> None:
        v = np.asarray(value, np.int32)
        self._buf = np.empty(max(16, 2 * v.size), np.int32)
        self._buf[: v.size] = v
        self.npages = int(v.size)
        self._view = self._buf[: self.npages]

    def add_pages(self, new: I32) -> None:
        n = self.npages + int(new.size)
        if n > self._buf.size:
            buf = np.empty(2 * n, np.int32)
            buf[: self.npages] = self._buf[: self.npages]
            self._buf = buf
        self._buf[self.npages : n] = new
        self.npages = n
        self._view = self._buf[:n]

    @property
    def req(self) -> Request:
        return self.group.req

    @property
    def output(self) -> list[int]:
        return self.out

    @property
    def prefilling(self) -> bool:
        return self.kv_len < self.target

    @property
    def remaining_new(self) -> int:
        """Tokens this sequence may still sample (``n`` branches for an unforked parent)."""
        left = self.req.params.max_new_tokens - len(self.output)
        return left * (self.req.params.n if self.branch is None else 1)
