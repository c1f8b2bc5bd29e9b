"""How often bf16 greedy decoding agrees with float32 on a random-weight model: the noise floor
against which tests/test_models_gpu.py's engine-vs-transformers agreement is read.

Same shape, seed and prompts as that test. Runs transformers in float32 (the same bf16 weights,
widened), in bf16 with sdpa and with eager attention, and the radixkv engine (kernels, bf16), and
prints free-running position agreement of each pair. GPU only.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from radixkv.engine import Engine, EngineConfig, Request, SamplingParams
from radixkv.engine.checkpoint import hf_model, model_from_shape

SHAPE, PROMPTS, STEM, PROMPT_LEN, NEW = "llama3.2-1b", 24, 64, 100, 24


def generate(hf, prompts):
    ids = torch.from_numpy(np.stack(prompts)).cuda()
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    return out[:, PROMPT_LEN:].cpu().tolist()


def agree(a, b):
    return sum(x == y for s, t in zip(a, b) for x, y in zip(s, t)) / (PROMPTS * NEW)


def main() -> None:
    torch.manual_seed(0)
    model = model_from_shape(SHAPE, "cuda", torch.bfloat16, seed=1, max_seq_len=1024)
    rng = np.random.default_rng(0)
    stem = rng.integers(2, model.config.vocab_size, size=STEM)
    prompts = [np.concatenate([stem, rng.integers(2, model.config.vocab_size,
                                                  size=PROMPT_LEN - STEM)]) for _ in range(PROMPTS)]
    engine = Engine(model, EngineConfig(pool_tokens=8192, page_size=16))
    done = {c.request.rid: c.outputs[0] for c in engine.run(
        [Request(f"r{i}", p, SamplingParams(max_new_tokens=NEW)) for i, p in enumerate(prompts)])}
    ours = [done[f"r{i}"] for i in range(PROMPTS)]
    sdpa = hf_model(model)
    eager = hf_model(model, attn_implementation="eager")
    fp32 = copy.deepcopy(sdpa).float()
    runs = {"radixkv bf16": ours, "hf bf16 sdpa": generate(sdpa, prompts),
            "hf bf16 eager": generate(eager, prompts), "hf fp32 sdpa": generate(fp32, prompts)}
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            print(f"{a:14s} vs {b:14s}: {agree(runs[a], runs[b]):.2%} of {PROMPTS * NEW} positions")


if __name__ == "__main__":
    main()
