"""A/B of per-request cache work between two radixkv builds on a loaded machine.

Each side runs in its own interpreter (a venv with that build installed); rounds alternate
A, B, A, B, ... so both see the same load. Per trace it reports each request's fastest repeat
averaged (the floor: preemption by other processes removed) and the process CPU seconds of
the replay loops. Uses bench/_replay.py's protocol for both sides (events off).

    python bench/lab/cache_ab.py --a /tmp/basevenv/bin/python --b .venv/bin/python \
        --shared /work/shared --traces chat,tree --rounds 4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]


def _call_floors(rk, _replay, t, cap, repeats):
    """µs per request in each cache/pool call: every call's fastest repeat (the replay is
    deterministic, so the k-th call of a method is the same call in every repeat)."""
    from collections import defaultdict

    class Timed:
        def __init__(self, obj, label, log):
            object.__setattr__(self, "_o", obj)
            object.__setattr__(self, "_l", label)
            object.__setattr__(self, "_log", log)

        def __getattr__(self, name):
            v = getattr(self._o, name)
            if not callable(v):
                return v
            log = self._log[f"{self._l}.{name}"]
            clock = time.perf_counter_ns

            def call(*a, **k):
                t0 = clock()
                r = v(*a, **k)
                log.append(clock() - t0)
                return r
            return call

    logs = []
    for _ in range(repeats):
        log = defaultdict(list)

        def inst(drv, log=log):
            drv.cache = Timed(drv.cache, "cache", log)
            drv.pool = Timed(drv.pool, "pool", log)
        r = _replay.replay(rk, t, cap, 16, instrument=inst)
        logs.append(log)
    n = r.requests
    return {k: sum(min(xs) for xs in zip(*(lg[k] for lg in logs))) / 1e3 / n
            for k in logs[0] if len(logs[0][k]) >= n / 100}


def worker(shared: str, traces: list[str], repeats: int, profile: bool = False) -> None:
    sys.path.insert(0, str(BENCH))
    import _replay
    import _traces
    import radixkv as rk

    class _RK:  # an older build's RadixCache has no `events` keyword
        def __getattr__(self, n):
            return getattr(rk, n)

        @staticmethod
        def RadixCache(pool, events=False):
            return rk.RadixCache(pool, events=True) if events else rk.RadixCache(pool)

    out = {}
    sd = _traces.shared_dir(shared)
    if profile:
        for name in traces:
            t = _traces.load_trace(sd, name)
            cap = _traces.capacity_tokens(sd, t, 16)
            out[name] = _call_floors(_RK(), _replay, t, cap, repeats)
        print(json.dumps(out))
        return
    for name in traces:
        t = _traces.load_trace(sd, name)
        cap = _traces.capacity_tokens(sd, t, 16)
        per = []
        cpu = []
        for _ in range(repeats):
            c0 = time.process_time()
            r = _replay.replay(_RK(), t, cap, 16)
            cpu.append(time.process_time() - c0)
            per.append(r.per_req_us)
        floor = [min(xs) for xs in zip(*per)]
        out[name] = {"floor_mean": statistics.fmean(floor),
                     "floor_p50": sorted(floor)[len(floor) // 2],
                     "cpu_s": min(cpu), "hit": r.matched_tokens / r.prompt_tokens,
                     "evicted": r.evicted_tokens}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a")
    ap.add_argument("--b")
    ap.add_argument("--shared", default="/work/shared")
    ap.add_argument("--traces", default="chat")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--profile", action="store_true", help="per-call floors instead")
    a = ap.parse_args()
    traces = a.traces.split(",")
    if a.worker:
        worker(a.shared, traces, a.repeats, a.profile)
        return
    res = {"A": [], "B": []}
    for _ in range(a.rounds):
        for side, py in (("A", a.a), ("B", a.b)):
            p = subprocess.run([py, __file__, "--worker", "--shared", a.shared, "--traces",
                                a.traces, "--repeats", str(a.repeats)]
                               + (["--profile"] if a.profile else []),
                               capture_output=True, text=True, check=True)
            res[side].append(json.loads(p.stdout.strip().splitlines()[-1]))
    if a.profile:
        for name in traces:
            keys = sorted(res["A"][0][name], key=lambda k: -res["A"][0][name][k])
            for k in keys:
                va = min(r[name].get(k, 0) for r in res["A"])
                vb = min(r[name].get(k, 0) for r in res["B"])
                print(f"{name:8s} {k:22s} A {va:7.2f} B {vb:7.2f} us/req")
        return
    for name in traces:
        fa = min(r[name]["floor_mean"] for r in res["A"])
        fb = min(r[name]["floor_mean"] for r in res["B"])
        ca = min(r[name]["cpu_s"] for r in res["A"])
        cb = min(r[name]["cpu_s"] for r in res["B"])
        print(f"{name:10s} floor mean us A {fa:7.2f} B {fb:7.2f} B/A {fb / fa:5.2f} | "
              f"loop cpu s A {ca:6.3f} B {cb:6.3f} B/A {cb / ca:5.2f} | hit A "
              f"{res['A'][0][name]['hit']:.4f} B {res['B'][0][name]['hit']:.4f} evicted A "
              f"{res['A'][0][name]['evicted']} B {res['B'][0][name]['evicted']}")


if __name__ == "__main__":
    main()
