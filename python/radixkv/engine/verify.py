"""Check every generated token against a dense recomputation (``TinyLlama.forward_dense``).

For a sequence ``prompt + output``, one dense causal forward over ``prompt + output[:-1]`` yields
the logits that preceded every output token; re-applying the same sampling rule (greedy, or the
same seeded Gumbel noise) must give back each output token. By induction this is the same as
generating from scratch with dense attention, token for token, but costs one forward per sequence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from radixkv.engine.model import TinyLlama
from radixkv.engine.request import Completion
from radixkv.engine.sampling import sample


@dataclass
class VerifyResult:
    sequences: int = 0
    tokens: int = 0
    mismatched_sequences: int = 0
    mismatched_tokens: int = 0
    max_abs_logit_diff: float | None = None  # engine logits vs dense, where the engine kept them
    first_mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.sequences > 0 and self.mismatched_tokens == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify(model: TinyLlama, completions: list[Completion], eos_token_id: int | None = None
           ) -> VerifyResult:
    result = VerifyResult()
    with torch.inference_mode():
        for comp in completions:
            req = comp.request
            p = req.params
            for branch, output in enumerate(comp.outputs):
                result.sequences += 1
                result.tokens += len(output)
                seq = np.concatenate([req.prompt, np.asarray(output[:-1], dtype=np.int32)])
                dense = model.forward_dense(torch.from_numpy(seq.astype(np.int64)))
                rows = dense[req.prompt.size - 1 :].cpu()
                bad = 0
                for i, token in enumerate(output):
                    expect = sample(rows[i], p.temperature, p.seed, branch, i)
                    if expect != token:
                        bad += 1
                        if len(result.first_mismatches) < 5:
                            result.first_mismatches.append(
                                f"{req.rid}[{branch}] token {i}: engine {token}, dense {expect}"
                            )
                stopped_early = len(output) < p.max_new_tokens
                if eos_token_id is not None and (
                    eos_token_id in output[:-1] or (stopped_early and output[-1] != eos_token_id)
                ):
                    bad += 1
                    result.first_mismatches.append(f"{req.rid}[{branch}]: wrong stop")
                elif eos_token_id is None and stopped_early:
                    bad += 1
                    result.first_mismatches.append(f"{req.rid}[{branch}]: stopped early")
                if comp.logits is not None and comp.logits[branch]:
                    kept = torch.from_numpy(np.stack(comp.logits[branch]))
                    diff = float((kept - rows[: len(output)]).abs().max())
                    prev = result.max_abs_logit_diff
                    result.max_abs_logit_diff = diff if prev is None else max(prev, diff)
                result.mismatched_tokens += bad
                result.mismatched_sequences += int(bad > 0)
    return result
