"""What a client submits (Request, SamplingParams) and what it gets back (Completion)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

import radixkv as rk

I32 = npt.NDArray[np.int32]


@dataclass(frozen=True)
class SamplingParams:
    """``temperature == 0`` is greedy. With ``temperature > 0`` each branch draws its own seeded
    Gumbel noise (see ``sampling.py``), so ``n > 1`` branches differ yet stay reproducible."""

    max_new_tokens: int = 16
    temperature: float = 0.0
    n: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise rk.InvalidArgument(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise rk.InvalidArgument(f"temperature must be >= 0, got {self.temperature}")
        if self.n < 1:
            raise rk.InvalidArgument(f"n must be >= 1, got {self.n}")


@dataclass
class Request:
    rid: str
    prompt: I32
    params: SamplingParams = field(default_factory=SamplingParams)
    arrival_step: int = 0  # the engine step at which the request enters the waiting queue
    namespace: str | None = None  # tenant / adapter: prefixes are shared only within one

    def __post_init__(self) -> None:
        self.prompt = np.ascontiguousarray(self.prompt, dtype=np.int32)
        if self.prompt.ndim != 1 or self.prompt.size == 0:
            raise rk.InvalidArgument(f"request {self.rid}: prompt must be a non-empty 1-D token list")


@dataclass
class Completion:
    """One finished request: one output list per branch (``n`` of them)."""

    request: Request
    outputs: list[list[int]]
    cached_prompt_tokens: int  # prompt tokens whose KV came from the prefix cache
    finish_step: int
    logits: list[list[npt.NDArray[np.float32]]] | None = None  # per branch, per output token
    ttft_s: float = 0.0  # submit to the first sampled token (queueing included)
    tpot_s: float = 0.0  # mean time between a branch's later tokens (0 with one token)
    preemptions: int = 0  # times its sequences were preempted and recomputed
