"""A small continuous-batching serving engine built on radixkv, for the demo and its tests.

``python -m radixkv demo`` replays built-in workloads through it and verifies every token against
dense recomputation. The pieces: ``model`` (Llama-style decoder), ``kv`` (paged KV pools and the
attention that goes through ``radixkv.ops``), ``prefix`` (radix prefix cache lifecycle),
``forking`` (parallel sampling by fork + copy-on-write), ``scheduler`` (continuous batching),
``batch`` (metadata), ``engine`` (the step loop), ``verify``, ``workloads``, ``report``, ``cli``.
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
