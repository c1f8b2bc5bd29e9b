"""Where radixkv's per-request time goes: µs per request spent in each cache/pool call.

Three extra, instrumented replays per trace (median per call): the driver's ``cache`` and ``pool`` are
wrapped in proxies that time every method call and property read (for example
``pool.available``). What the calls do not account for is the driver's own Python
glue (NumPy slicing, the row table, attribute lookups); it is reported as the
plain run's mean minus the sum of the calls, since the proxies inflate the
instrumented total.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any, Dict, List

import _replay


class _Timed:
    """Proxy that charges every call / property read of ``obj`` to ``label.name``."""

    def __init__(self, obj: Any, label: str, ns: Dict[str, int], calls: Dict[str, int]):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_ns", ns)
        object.__setattr__(self, "_calls", calls)

    def __getattr__(self, name: str) -> Any:
        clock = time.perf_counter_ns
        key = f"{self._label}.{name}"
        t0 = clock()
        v = getattr(self._obj, name)
        dt = clock() - t0
        if not callable(v):
            self._ns[key] += dt
            self._calls[key] += 1
            return v
        ns, calls = self._ns, self._calls

        def timed(*args: Any, **kw: Any) -> Any:
            t1 = clock()
            try:
                return v(*args, **kw)
            finally:
                ns[key] += clock() - t1
                calls[key] += 1

        return timed


def breakdown(rk: Any, trace: Any, capacity: int, max_running: int, split_prompt: bool,
              plain_mean_us: float, passes: int = 3) -> Dict[str, Any]:
    """Median over ``passes`` instrumented replays of each call's µs per request."""
    per_pass: List[Dict[str, float]] = []
    calls_pass: List[Dict[str, float]] = []
    instrumented = []
    for _ in range(passes):
        ns: Dict[str, int] = defaultdict(int)
        calls: Dict[str, int] = defaultdict(int)

        def instrument(drv: _replay.RadixkvDriver) -> None:
            drv.cache = _Timed(drv.cache, "cache", ns, calls)
            drv.pool = _Timed(drv.pool, "pool", ns, calls)

        res = _replay.replay(rk, trace, capacity, max_running, split_prompt,
                             instrument=instrument)
        n = res.requests
        # calls made once after the replay (final sizes) are not per-request work
        per_pass.append({k: v / 1e3 / n for k, v in ns.items() if calls[k] >= n / 100})
        calls_pass.append({k: calls[k] / n for k in per_pass[-1]})
        instrumented.append(res.summary()["mean_us"])
    keys = sorted(per_pass[0], key=lambda k: -per_pass[0][k])
    per = {k: statistics.median(p.get(k, 0.0) for p in per_pass) for k in keys}
    per = dict(sorted(per.items(), key=lambda kv: -kv[1]))
    return {
        "trace": trace.name,
        "passes": passes,
        "plain_mean_us": plain_mean_us,
        "instrumented_mean_us": statistics.median(instrumented),
        "us_per_request": per,
        "calls_per_request": {k: calls_pass[0][k] for k in per},
        "glue_us_per_request": plain_mean_us - sum(per.values()),
    }


def table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| trace | call | µs/request | calls/request | µs/call |", "|---|---|---:|---:|---:|"]
    for r in rows:
        for k, us in r["us_per_request"].items():
            c = r["calls_per_request"][k]
            lines.append(f"| {r['trace']} | {k} | {us:.2f} | {c:.2f} | {us / c:.3f} |")
        lines.append(f"| {r['trace']} | (driver glue: plain mean − calls) | "
                     f"{r['glue_us_per_request']:.2f} | | |")
    return "\n".join(lines)
