"""Serving traces for ``bench/serve.py`` and the transformers baseline (issue 11 (a)-(d)).

Deterministic for a seed; token ids are drawn from ``[2, vocab_size)`` (0 and 1 are left for
padding and EOS). Traces carry token ids only: greedy or temperature sampling is the engine's
business.

- ``shared_prefix`` (a): one 1024-token system prompt shared by every request, then 128 tokens
  of its own; 128 new tokens each.
- ``unique`` (b): 1152-token prompts with nothing in common; 128 new tokens each.
- ``chat`` (c): multi-turn conversations; turn ``t + 1``'s prompt is turn ``t``'s prompt, the
  answer generated for it and a new user message. ``num_requests`` counts turns over all
  conversations (``turns`` per conversation); only the first turns are in ``initial()``, the rest
  come from ``follow_up`` as answers arrive.
- ``parallel`` (d): 512-token prompts sampled ``n = 4`` times each; ``num_requests`` counts sampled
  sequences, so there are ``num_requests // 4`` prompts.

``scale`` (default 1.0) multiplies every length (prompt pieces and new tokens) for smoke runs on
the CPU; the shapes of the traces stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

TRACES = ("shared_prefix", "unique", "chat", "parallel")


@dataclass
class TraceRequest:
    rid: str
    prompt: list[int]
    max_new_tokens: int
    n: int = 1  # parallel samples
    conversation: Optional[int] = None
    turn: int = 0


class Trace:
    """A named list of requests; ``follow_up`` gives multi-turn chat's next turn."""

    name: str

    def __init__(self, name: str, requests: list[TraceRequest]) -> None:
        self.name = name
        self._requests = requests

    def initial(self) -> list[TraceRequest]:
        return list(self._requests)

    def follow_up(self, req: TraceRequest, output: list[int]) -> Optional[TraceRequest]:
        return None

    def total_requests(self) -> int:
        """Requests over the whole trace, follow-ups included."""
        return len(self._requests)

    def total_sequences(self) -> int:
        """Sampled sequences over the whole trace (a request with ``n`` samples counts ``n``)."""
        return sum(r.n for r in self._requests)


class ChatTrace(Trace):
    def __init__(self, name: str, requests: list[TraceRequest], users: list[list[list[int]]],
                 new_tokens: int) -> None:
        super().__init__(name, requests)
        self._users = users  # [conversation][turn] -> user message tokens
        self._new = new_tokens

    def follow_up(self, req: TraceRequest, output: list[int]) -> Optional[TraceRequest]:
        c, t = req.conversation, req.turn + 1
        if c is None or t >= len(self._users[c]):
            return None
        prompt = list(req.prompt) + [int(x) for x in output] + self._users[c][t]
        return TraceRequest(f"chat{c}.turn{t}", prompt, self._new, 1, c, t)

    def total_requests(self) -> int:
        return sum(len(u) for u in self._users)

    def total_sequences(self) -> int:
        return self.total_requests()


def _tokens(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return [int(x) for x in rng.integers(2, vocab, size=n)]


def _len(n: int, scale: float) -> int:
    return max(1, int(round(n * scale)))


def make_trace(name: str, num_requests: int = 256, vocab_size: int = 128256, seed: int = 0,
               scale: float = 1.0) -> Trace:
    """Build trace ``name`` (one of ``TRACES``) with ``num_requests`` requests (see the module
    docstring for what a request counts in ``chat`` and ``parallel``)."""
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r} (choose from {', '.join(TRACES)})")
    if num_requests < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests}")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be >= 3, got {vocab_size}")
    rng = np.random.default_rng([seed, TRACES.index(name)])
    new = _len(128, scale)
    if name == "shared_prefix":
        system = _tokens(rng, vocab_size, _len(1024, scale))
        reqs = [TraceRequest(f"shared{i}", system + _tokens(rng, vocab_size, _len(128, scale)), new)
                for i in range(num_requests)]
        return Trace(name, reqs)
    if name == "unique":
        reqs = [TraceRequest(f"unique{i}", _tokens(rng, vocab_size, _len(1152, scale)), new)
                for i in range(num_requests)]
        return Trace(name, reqs)
    if name == "parallel":
        n = 4
        reqs = [TraceRequest(f"parallel{i}", _tokens(rng, vocab_size, _len(512, scale)), new, n)
                for i in range(max(1, num_requests // n))]
        return Trace(name, reqs)
    # chat: conversations of `turns` turns behind one shared system prompt
    turns = 4
    conversations = max(1, num_requests // turns)
    system = _tokens(rng, vocab_size, _len(256, scale))
    users = [[_tokens(rng, vocab_size, _len(128, scale)) for _ in range(turns)]
             for _ in range(conversations)]
    first = [TraceRequest(f"chat{c}.turn0", system + users[c][0], new, 1, c, 0)
             for c in range(conversations)]
    return ChatTrace(name, first, users, new)
