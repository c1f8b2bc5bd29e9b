"""Host time per engine step with the model taken out (its forward returns constant logits):
what scheduling, Rust metadata, packing and bookkeeping cost at a given batch, on this CPU.

    python bench/lab/engine_host.py --requests 256 --page-size 16
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np
import torch

from radixkv.engine.engine import Engine, EngineConfig
from radixkv.engine.model import ModelConfig
from radixkv.engine.request import Request, SamplingParams
from radixkv.engine.scheduler import SchedulerConfig


class NullModel:
    """The model interface with a forward that costs (almost) nothing."""

    def __init__(self, vocab: int = 1024) -> None:
        self.config = ModelConfig(vocab_size=vocab, num_layers=1, max_seq_len=4096)
        self.device = torch.device("cpu")
        self.dtype = torch.float32

    def forward(self, tokens, positions, attend, logits_rows=None):  # noqa: ANN001, ANN201
        n = tokens.shape[0] if logits_rows is None else logits_rows.shape[0]
        return torch.zeros(n, self.config.vocab_size)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--prompt", type=int, default=1152)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--graphs", action="store_true")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    reqs = [Request(f"r{i}", rng.integers(2, 1000, size=a.prompt, dtype=np.int32),
                    SamplingParams(max_new_tokens=a.new)) for i in range(a.requests)]
    eng = Engine(NullModel(), EngineConfig(
        pool_tokens=(a.prompt + a.new) * a.requests + 4096, page_size=a.page_size,
        cuda_graphs=a.graphs, memory_samples=False,
        scheduler=SchedulerConfig(max_batch_tokens=1 << 16, chunk_size=1 << 16, max_running=a.requests)))
    t = time.perf_counter()
    if a.profile:
        cProfile.runctx("eng.run(reqs)", globals(), locals(), "/tmp/engine_host.prof")
        pstats.Stats("/tmp/engine_host.prof").sort_stats("tottime").print_stats(20)
    else:
        eng.run(reqs)
    wall = time.perf_counter() - t
    dec = [x for x in eng.stats.timings if x.kind == "decode" and x.batch == a.requests]
    pre = statistics.median(x.host_pre for x in dec) * 1e3
    post = statistics.median(x.host_post for x in dec) * 1e3
    fwd = statistics.median(x.launch + x.wait for x in dec) * 1e3
    print(f"{a.requests} requests, page {a.page_size}: {len(dec)} full decode steps, host pre "
          f"{pre:.3f} ms + post {post:.3f} ms per step (null forward + sampling {fwd:.3f} ms); "
          f"run {wall:.1f} s")


if __name__ == "__main__":
    main()
