"""Check every generated token against a recomputation by a reference model.

For a sequence ``prompt + output``, one causal forward over ``prompt + output[:-1]`` yields the
logits that preceded every output token; re-applying the same sampling rule (greedy, or the same
seeded Gumbel noise) must give back each output token. By induction this is the same as generating
from scratch with the reference, token for token, but costs one forward per sequence.

Two references: ``DenseReference`` (the engine's model with plain causal attention, no radixkv
code: ``LlamaModel.forward_dense``) and ``TransformersReference`` (transformers' own model of the
same checkpoint, the implementation users trust).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from radixkv.engine.model import LlamaModel
from radixkv.engine.request import Completion
from radixkv.engine.sampling import sample


class Reference(Protocol):
    name: str  # "dense" or "transformers", reported as verify.reference

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """float32 [L, V] on the CPU: the logits after each of ``tokens`` int64 [L]."""
        ...


class DenseReference:
    name = "dense"

    def __init__(self, model: LlamaModel) -> None:
        self.model = model

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.forward_dense(tokens).cpu()


class TransformersReference:
    """A ``transformers`` causal LM (``AutoModelForCausalLM``), run without a KV cache."""

    name = "transformers"

    def __init__(self, hf_model: Any) -> None:
        self.hf = hf_model
        self.device = next(hf_model.parameters()).device

    @classmethod
    def from_pretrained(cls, path: str, device: torch.device, dtype: torch.dtype
                        ) -> TransformersReference:
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return cls(hf.to(device).eval())  # type: ignore[arg-type]

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = self.hf(input_ids=tokens.to(self.device)[None], use_cache=False)
        logits: torch.Tensor = out.logits[0]
        return logits.float().cpu()


@dataclass
class VerifyResult:
    sequences: int = 0
    tokens: int = 0
    mismatched_sequences: int = 0
    mismatched_tokens: int = 0
    max_abs_logit_diff: float | None = None  # engine logits vs reference, where kept
    first_mismatches: list[str] = field(default_factory=list)
    reference: str = "dense"

    @property
    def ok(self) -> bool:
        return self.sequences > 0 and self.mismatched_tokens == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify(model: LlamaModel, completions: list[Completion], eos_token_id: int | None = None,
           reference: Reference | None = None) -> VerifyResult:
    """Re-derive every output token of ``completions`` from ``reference``'s logits (the model's
    dense path if None)."""
    ref = reference if reference is not None else DenseReference(model)
    result = VerifyResult(reference=ref.name)
    with torch.inference_mode():
        for comp in completions:
            req = comp.request
            p = req.params
            for branch, output in enumerate(comp.outputs):
                result.sequences += 1
                result.tokens += len(output)
                seq = np.concatenate([req.prompt, np.asarray(output[:-1], dtype=np.int32)])
                rows = ref.logits(torch.from_numpy(seq.astype(np.int64)))[req.prompt.size - 1 :]
                bad = 0
                for i, token in enumerate(output):
                    expect = sample(rows[i], p.temperature, p.seed, branch, i)
                    if expect != token:
                        bad += 1
                        if len(result.first_mismatches) < 5:
                            result.first_mismatches.append(
                                f"{req.rid}[{branch}] token {i}: engine {token}, "
                                f"{ref.name} {expect}"
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
