"""Probe: wall ns per call of each Rust ``RadixCache`` method the SGLang plugin calls, measured
in the stage of ``bench/cache_bench_sglang.py`` (``perf_counter_ns`` around the call only, via a
proxy in front of the plugin's ``tree``), beside the stage's own per-call CPU numbers.

    PYTHONPATH=python .venv-anchors/bin/python bench/lab/plugin_rust_share.py \
        --traces chat,fewshot,chat_evict [--events] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))


class Proxy:
    """Times every method call made on ``inner`` (wall ns, the call alone)."""

    def __init__(self, inner: Any, acc: Dict[str, List[int]]):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_acc", acc)

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._inner, name)
        if not callable(v):
            return v
        acc = self._acc.setdefault(name, [0, 0])
        clock = time.perf_counter_ns

        def call(*a: Any) -> Any:
            t0 = clock()
            r = v(*a)
            acc[0] += clock() - t0
            acc[1] += 1
            return r

        return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared")
    ap.add_argument("--traces", default="chat,fewshot,chat_evict")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", action="store_true")
    a = ap.parse_args()
    import _sglang_env

    _sglang_env.prepare()
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _traces
    import cache_bench_sglang as cbs

    from radixkv.integrations.sglang.cache import RadixKVPrefixCache

    accs: List[Dict[str, List[int]]] = []

    class Probed(RadixKVPrefixCache):  # type: ignore[misc]
        def reset(self) -> None:
            super().reset()
            acc: Dict[str, List[int]] = {}
            accs.append(acc)
            self.tree = Proxy(self.tree, acc)

    def make(params: Any) -> Any:
        params.enable_kv_cache_events = a.events
        return Probed(params)

    cbs.cache_factory = lambda _s: make
    system = "radixkv-plugin+events" if a.events else "radixkv-plugin"
    shared = _traces.shared_dir(a.shared)
    for name in a.traces.split(","):
        trace = _traces.load_trace(shared, name)
        cap = _traces.capacity_tokens(shared, trace, 16)
        n = len(trace.requests)
        rows, rust = [], []
        for r in range(a.rounds + 1):
            accs.clear()
            row = cbs.replay(system, trace, cap, 16)
            if r:
                rows.append(row)
                rust.append({k: v for acc in accs for k, v in acc.items()})
        cpu = statistics.median(x["work_cpu_mean_us"] for x in rows)
        by = {c: statistics.median(x["work_cpu_by_call_us"].get(c, 0) for x in rows)
              for c in rows[0]["work_cpu_by_call_us"]}
        print(f"{name}: cpu/request {cpu:.2f} us | " +
              " ".join(f"{c}={v:.2f}" for c, v in sorted(by.items()) if v >= 0.3))
        names = sorted({k for d in rust for k in d})
        parts = []
        for k in names:
            ns = statistics.median(d[k][0] for d in rust if k in d)
            calls = statistics.median(d[k][1] for d in rust if k in d)
            parts.append(f"{k}={ns / max(calls, 1) / 1e3:.2f}us x{calls / n:.2f}")
        print("   rust wall per call: " + " ".join(parts), flush=True)


if __name__ == "__main__":
    main()
