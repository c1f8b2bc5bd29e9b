"""Scheduling only (null model): trace (b) at a KV budget, paged vs contiguous admission.

Counts steps, preemptions, recomputed tokens and batch sizes, which do not depend on the model:

    python bench/lab/admission_sim.py --requests 256 --budget-seqs 64
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from engine_host import NullModel  # noqa: E402
from serve_traces import make_trace  # noqa: E402

from radixkv.engine.engine import Engine, EngineConfig  # noqa: E402
from radixkv.engine.request import Request, SamplingParams  # noqa: E402
from radixkv.engine.scheduler import SchedulerConfig  # noqa: E402


TIMELINE = False


def run(reqs: list[Request], pool: int, admission: str, contiguous_len: Optional[int],
        floor: float) -> dict[str, Any]:
    model = NullModel(vocab=128256)
    model.config = replace(model.config, max_seq_len=8192)
    sched = SchedulerConfig(max_batch_tokens=8192, chunk_size=8192, max_running=256,
                            admission=admission, contiguous_len=contiguous_len,  # type: ignore[arg-type]
                            decode_reserve=floor)
    eng = Engine(model, EngineConfig(pool_tokens=pool, page_size=16, cuda_graphs=False,
                                     memory_samples=False, scheduler=sched))
    t = time.perf_counter()
    eng.run(reqs)
    dec = [x.batch for x in eng.stats.timings if x.kind == "decode"]
    if TIMELINE:
        print(" ".join(f"{x.kind[0]}{x.batch}" for x in eng.stats.timings))
    return {"steps": eng.stats.steps, "preempt": eng.scheduler.preemptions,
            "recomputed": eng.stats.recomputed_tokens, "prefill": eng.stats.prefill_computed,
            "decode_batch_mean": statistics.fmean(dec) if dec else 0, "max_batch": max(dec, default=0),
            "wall": time.perf_counter() - t}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--budget-seqs", type=int, default=64)
    p.add_argument("--floor", type=float, default=0.25)
    p.add_argument("--max-len", type=int, default=8192)
    p.add_argument("--only", default=None, help="run only the configuration with this name")
    p.add_argument("--timeline", action="store_true", help="print each step's kind and batch")
    a = p.parse_args()
    global TIMELINE
    TIMELINE = a.timeline
    torch.set_num_threads(1)
    trace = make_trace("unique", a.requests, 128256, 0, 1.0)
    reqs = [Request(r.rid, np.asarray(r.prompt, np.int32), SamplingParams(max_new_tokens=r.max_new_tokens))
            for r in trace.initial()]
    per = len(reqs[0].prompt) + reqs[0].params.max_new_tokens
    pool = -(-a.budget_seqs * per // 16) * 16
    for name, adm, cl in (("paged", "paged", None), ("contig exact", "contiguous", None),
                          (f"contig max {a.max_len}", "contiguous", a.max_len)):
        if a.only is None or a.only == name:
            print(name, run(reqs, pool, adm, cl, a.floor), flush=True)


if __name__ == "__main__":
    main()
