"""Built-in serving traces, deterministic for a seed. Token ids are drawn from ``[2, vocab)``
(0 and 1 are left for padding and EOS).

- chat: conversations sharing one system prompt; each next turn is the previous prompt, the
  model's answer and a new user message, submitted when the previous turn finishes.
- fewshot: many questions behind one long shared block of worked examples.
- parallel: prompts sampled ``n`` times each (branches share the prompt's KV by fork).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from radixkv.engine.request import Completion, Request, SamplingParams

FollowUp = Callable[[Completion], list[Request]]
NAMES = ("chat", "fewshot", "parallel", "all")


@dataclass
class Workload:
    name: str
    requests: list[Request]
    follow_ups: list[FollowUp] = field(default_factory=list)
    total_requests: int = 0  # including follow-ups not yet submitted

    def on_finish(self, comp: Completion) -> list[Request]:
        out: list[Request] = []
        for f in self.follow_ups:
            out.extend(f(comp))
        return out


def _tokens(rng: np.random.Generator, vocab: int, n: int) -> np.ndarray:
    return rng.integers(2, vocab, size=n, dtype=np.int32)


def chat(seed: int, vocab: int, conversations: int = 6, turns: int = 4, system_len: int = 96,
         user_len: tuple[int, int] = (12, 32), out_len: tuple[int, int] = (12, 24),
         think_steps: int = 3) -> Workload:
    rng = np.random.default_rng([seed, 1])
    system = _tokens(rng, vocab, system_len)
    users = [[_tokens(rng, vocab, int(rng.integers(*user_len))) for _ in range(turns)]
             for _ in range(conversations)]
    outs = [[int(rng.integers(*out_len)) for _ in range(turns)] for _ in range(conversations)]

    def make(c: int, t: int, history: np.ndarray, arrival: int) -> Request:
        prompt = np.concatenate([history, users[c][t]])
        params = SamplingParams(max_new_tokens=outs[c][t], seed=seed * 1000 + c * 10 + t)
        return Request(f"chat{c}.turn{t}", prompt, params, arrival_step=arrival)

    def follow(comp: Completion) -> list[Request]:
        rid = comp.request.rid
        if not rid.startswith("chat"):
            return []
        c, t = (int(x) for x in rid[4:].split(".turn"))
        if t + 1 >= turns:
            return []
        history = np.concatenate([comp.request.prompt, np.asarray(comp.outputs[0], np.int32)])
        return [make(c, t + 1, history, comp.finish_step + think_steps)]

    first = [make(c, 0, system, 2 * c) for c in range(conversations)]
    return Workload("chat", first, [follow], conversations * turns)


def fewshot(seed: int, vocab: int, questions: int = 16, prefix_len: int = 320,
            question_len: tuple[int, int] = (8, 20), out_len: int = 8) -> Workload:
    rng = np.random.default_rng([seed, 2])
    examples = _tokens(rng, vocab, prefix_len)
    reqs = [
        Request(f"fewshot{i}", np.concatenate([examples, _tokens(rng, vocab, int(rng.integers(*question_len)))]),
                SamplingParams(max_new_tokens=out_len, seed=seed * 1000 + 500 + i), arrival_step=i)
        for i in range(questions)
    ]
    return Workload("fewshot", reqs, [], questions)


def parallel(seed: int, vocab: int, prompts: int = 4, n: int = 4, prompt_len: tuple[int, int] = (40, 90),
             out_len: int = 24, temperature: float = 0.8) -> Workload:
    rng = np.random.default_rng([seed, 3])
    reqs = [
        Request(f"parallel{i}", _tokens(rng, vocab, int(rng.integers(*prompt_len))),
                SamplingParams(max_new_tokens=out_len, temperature=temperature, n=n,
                               seed=seed * 1000 + 900 + i), arrival_step=3 * i)
        for i in range(prompts)
    ]
    return Workload("parallel", reqs, [], prompts)


def build(name: str, seed: int, vocab: int) -> Workload:
    if name == "chat":
        return chat(seed, vocab)
    if name == "fewshot":
        return fewshot(seed, vocab)
    if name == "parallel":
        return parallel(seed, vocab)
    if name == "all":
        parts = [chat(seed, vocab), fewshot(seed, vocab), parallel(seed, vocab)]
        reqs = sorted((r for p in parts for r in p.requests), key=lambda r: r.arrival_step)
        return Workload("all", reqs, [f for p in parts for f in p.follow_ups],
                        sum(p.total_requests for p in parts))
    raise ValueError(f"unknown workload {name!r} (choose from {', '.join(NAMES)})")
