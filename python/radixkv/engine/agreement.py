"""Token agreement between two engine runs of the same requests (e.g. an FP8 KV pool against the
model's dtype): not a correctness check, since a quantised cache changes the logits slightly and a
greedy or seeded choice between two near-equal logits can flip, after which the two sequences
go their own ways.

Sequences are matched by request id and branch. Position ``i`` of a sequence agrees when both runs
generated a token there and the tokens are equal; positions only one run reached (one stopped
early) count as disagreeing. ``first_divergence`` is the first disagreeing position. Follow-up
requests (the next chat turn) embed the previous answer, so after a divergence their prompts
differ too; ``same_prompt`` counts the sequences whose prompts were equal.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from radixkv.engine.request import Completion


@dataclass
class Agreement:
    sequences: int = 0  # matched by (request id, branch)
    unmatched: int = 0  # sequences present in only one run
    positions: int = 0  # generated positions, the longer of the two outputs per sequence
    equal_positions: int = 0
    identical_sequences: int = 0
    same_prompt: int = 0
    same_prompt_positions: int = 0
    same_prompt_equal_positions: int = 0
    first_divergence: list[int] = field(default_factory=list)  # per diverged sequence

    @property
    def rate(self) -> float:
        """Fraction of generated positions equal (0 when nothing was compared)."""
        return self.equal_positions / self.positions if self.positions else 0.0

    @property
    def same_prompt_rate(self) -> float:
        p = self.same_prompt_positions
        return self.same_prompt_equal_positions / p if p else 0.0

    def to_dict(self) -> dict[str, Any]:
        fd = self.first_divergence
        d = asdict(self)
        d.pop("first_divergence")
        return {**d, "rate": self.rate, "same_prompt_rate": self.same_prompt_rate,
                "diverged_sequences": len(fd),
                "first_divergence_min": min(fd) if fd else None,
                "first_divergence_median": statistics.median(fd) if fd else None,
                "first_divergence_mean": statistics.fmean(fd) if fd else None}

    def summary(self) -> str:
        d = self.to_dict()
        text = (f"{100 * self.rate:.1f}% of {self.positions} generated positions equal; "
                f"{self.identical_sequences}/{self.sequences} sequences identical")
        if self.first_divergence:
            text += (f"; first divergence at position min {d['first_divergence_min']}, median "
                     f"{d['first_divergence_median']:g}, mean {d['first_divergence_mean']:.1f}")
        if self.same_prompt < self.sequences:
            text += (f"; {self.same_prompt} sequences had the same prompt in both runs "
                     f"({100 * self.same_prompt_rate:.1f}% of their positions equal)")
        return text


def compare(base: list[Completion], other: list[Completion]) -> Agreement:
    """Agreement of ``other``'s generated tokens with ``base``'s (see the module doc)."""
    a = {(c.request.rid, b): (c.request.prompt, o) for c in base for b, o in enumerate(c.outputs)}
    b_ = {(c.request.rid, b): (c.request.prompt, o) for c in other for b, o in enumerate(c.outputs)}
    res = Agreement(unmatched=len(a.keys() ^ b_.keys()))
    for key in sorted(a.keys() & b_.keys()):
        (pa, oa), (pb, ob) = a[key], b_[key]
        n = max(len(oa), len(ob))
        common = min(len(oa), len(ob))
        eq = np.asarray(oa[:common]) == np.asarray(ob[:common])
        equal = int(eq.sum())
        res.sequences += 1
        res.positions += n
        res.equal_positions += equal
        if equal == n:
            res.identical_sequences += 1
        else:
            bad = np.flatnonzero(~eq)
            res.first_divergence.append(int(bad[0]) if bad.size else common)
        if pa.shape == pb.shape and bool((pa == pb).all()):
            res.same_prompt += 1
            res.same_prompt_positions += n
            res.same_prompt_equal_positions += equal
    return res
