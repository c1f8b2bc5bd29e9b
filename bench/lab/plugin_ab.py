"""Interleaved A/B of two versions of the SGLang plugin's Python code in one process, on the
stage of ``bench/cache_bench_sglang.py`` (same replay, timer and pools).

``--old DIR``: a folder holding a copy of an older ``radixkv/integrations/sglang`` package
named ``oldsg`` (e.g. ``cp -r python/radixkv/integrations/sglang /tmp/x/oldsg``); it imports
the same ``radixkv._core`` as the current plugin, so the old code must still run on it (unless
that copy imports another build of the extension itself: bench/lab/old_core.md). Rounds
alternate old / new; prints CPU µs of cache work per request (median over rounds) and by call.

    PYTHONPATH=python .venv-anchors/bin/python bench/lab/plugin_ab.py --old /tmp/x \
        --traces chat,fewshot,chat_evict --rounds 7 [--events]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared")
    ap.add_argument("--old", default="")
    ap.add_argument("--traces", default="chat,fewshot,chat_evict")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", action="store_true")
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--new-first", action="store_true",
                    help="each round runs new before old (to see an order effect)")
    a = ap.parse_args()
    import _sglang_env

    _sglang_env.prepare()
    import logging
    import os
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _traces
    import cache_bench_sglang as cbs

    from radixkv.integrations.sglang.cache import RadixKVPrefixCache as New

    classes: Dict[str, Any] = {"new": New}
    if a.old:
        sys.path.insert(0, a.old)
        from oldsg.cache import RadixKVPrefixCache as Old  # type: ignore[import-not-found]

        classes = {"new": New, "old": Old} if a.new_first else {"old": Old, "new": New}
    system = "radixkv-plugin+events" if a.events else "radixkv-plugin"
    shared = _traces.shared_dir(a.shared)
    print(f"load {os.getloadavg()}")
    for name in a.traces.split(","):
        trace = _traces.load_trace(shared, name)
        cap = _traces.capacity_tokens(shared, trace, a.max_running)
        if a.limit:
            trace.requests = trace.requests[: a.limit]
        runs: Dict[str, List[Dict[str, Any]]] = {k: [] for k in classes}
        for r in range(a.rounds + 1):
            for label, cls in classes.items():

                def factory(_system: str, cls: Any = cls) -> Any:
                    if not a.events:
                        return cls

                    def make(params: Any) -> Any:
                        params.enable_kv_cache_events = True
                        return cls(params)

                    return make

                cbs.cache_factory = factory
                row = cbs.replay(system, trace, cap, a.max_running)
                if r:  # the first round is untimed
                    runs[label].append(row)
        for label, rows in runs.items():
            cpu = statistics.median(x["work_cpu_mean_us"] for x in rows)
            mean = statistics.median(x["work_mean_us"] for x in rows)
            calls = sorted(rows[0]["work_cpu_by_call_us"])
            by = {c: statistics.median(x["work_cpu_by_call_us"].get(c, 0) for x in rows)
                  for c in calls}
            parts = " ".join(f"{c}={v:.2f}" for c, v in by.items() if v >= 0.3)
            print(f"{name:10s} {label:4s} cpu {cpu:6.2f} mean {mean:6.2f} | {parts}", flush=True)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
