"""A small continuous-batching serving engine built on radixkv, for the demo and its tests.

``python -m radixkv demo`` replays built-in workloads through it and verifies every token against
dense recomputation. The pieces: ``model`` (Llama-style decoder), ``seq`` (a sequence's state),
``memory`` (the paged KV pool under the radix cache: match, allocate, publish, release, fork),
``kv`` (the KV tensors and the attention through ``radixkv.ops``), ``scheduler`` (continuous
batching, admission, preemption), ``batch`` (Rust metadata packed into one host-to-device copy),
``graphs`` (CUDA graphs of decode steps), ``sampling``, ``engine`` (the step loop), ``stats``,
``verify``, ``agreement`` (token agreement of two runs, e.g. an FP8 pool vs the model dtype),
``workloads``, ``report``, ``cli``.
"""

from __future__ import annotations

from radixkv.engine.engine import Engine, EngineConfig
from radixkv.engine.model import ModelConfig, TinyLlama
from radixkv.engine.request import Completion, Request, SamplingParams
from radixkv.engine.scheduler import SchedulerConfig
from radixkv.engine.verify import VerifyResult, verify

__all__ = [
    "Completion",
    "Engine",
    "EngineConfig",
    "ModelConfig",
    "Request",
    "SamplingParams",
    "SchedulerConfig",
    "TinyLlama",
    "VerifyResult",
    "verify",
]
