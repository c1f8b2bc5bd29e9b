"""Time the calls made into one prefix-cache object, and nothing else.

``CacheWorkTimer(cache)`` replaces, on that instance only, every public method of SGLang's
``BasePrefixCache`` surface (plus ``insert``, ``take_events``, ``sanity_check`` and
``all_values_flatten`` where the class has them) with a wrapper that adds the call's wall time
to ``ns``. A call made from inside another timed call (``checkpoint`` -> ``lock`` ->
``inc_lock_ref``) is run but not timed again, so ``ns`` is the time spent inside the cache
object as seen from its callers: the scheduler's helpers, the allocator's
``evict_to_free_tokens``, the driver's ``take_events``. Work a cache hands to SGLang's
allocator from inside such a call (``free``, ``free_segment``) is counted; SGLang's own
``Req`` and allocator work around the calls is not.

The same wrapper goes on every cache compared, so its own cost (``overhead_ns()``, a wrapped
no-op) is in every number alike, once per outer call. Besides wall time it reads the thread's
CPU time (``time.thread_time_ns``) around each outer call: on a machine other processes load,
a wall-clock span of a few µs may include milliseconds of waiting for a core, while the
thread's CPU time does not.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Dict, Iterable, List, Tuple

EXTRA = ("insert", "take_events", "sanity_check", "all_values_flatten")


def surface(base: type, extra: Iterable[str] = EXTRA) -> List[str]:
    """Public method names of ``base`` (functions, static and class methods; no properties)
    plus ``extra``."""
    names = []
    for n in dir(base):
        if n.startswith("_"):
            continue
        v = inspect.getattr_static(base, n)
        if inspect.isfunction(v) or isinstance(v, (staticmethod, classmethod)):
            names.append(n)
    return sorted(set(names) | set(extra))


class CacheWorkTimer:
    """Wall time inside one cache object's methods, outermost calls only.

    ``ns``: total ns; ``cpu_ns``: the thread's CPU time over the same spans (time spent
    preempted by other processes left out); ``calls``: outer calls; ``by_name``: name ->
    [ns, calls, cpu_ns];
    ``inner_ns`` / ``inner_cpu_ns``: the part of ``ns`` / ``cpu_ns`` spent in the methods
    given to ``watch_inner`` (SGLang's allocator: the same code under every cache);
    ``inner_calls``: how many such calls."""

    def __init__(self, cache: Any, names: Iterable[str]):
        self.ns = 0
        self.calls = 0
        self.inner_ns = 0
        self.inner_cpu_ns = 0
        self.inner_calls = 0
        self.cpu_ns = 0
        self.by_name: Dict[str, List[int]] = {}
        self._depth = 0
        for name in names:
            fn = getattr(cache, name, None)
            if callable(fn):
                setattr(cache, name, self._wrap(name, fn))

    def watch_inner(self, obj: Any, names: Iterable[str]) -> None:
        """Also time ``obj``'s ``names`` when a timed cache call makes them (outermost of
        those only), into ``inner_ns``."""
        clock, cpu = time.perf_counter_ns, time.thread_time_ns
        for name in names:
            fn = getattr(obj, name, None)
            if not callable(fn):
                continue

            def timed(*a: Any, _fn: Any = fn, **k: Any) -> Any:
                if self._depth != 1:
                    return _fn(*a, **k)
                self._depth = 2
                c0 = cpu()
                t0 = clock()
                try:
                    return _fn(*a, **k)
                finally:
                    self.inner_ns += clock() - t0
                    self.inner_cpu_ns += cpu() - c0
                    self.inner_calls += 1
                    self._depth = 1

            setattr(obj, name, timed)

    def _wrap(self, name: str, fn: Any) -> Any:
        clock, cpu = time.perf_counter_ns, time.thread_time_ns
        acc = self.by_name.setdefault(name, [0, 0, 0])

        def timed(*a: Any, **k: Any) -> Any:
            if self._depth:
                return fn(*a, **k)
            self._depth = 1
            c0 = cpu()
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                dt = clock() - t0
                dc = cpu() - c0
                self._depth = 0
                self.ns += dt
                self.cpu_ns += dc
                self.calls += 1
                acc[0] += dt
                acc[1] += 1
                acc[2] += dc

        timed.__name__ = name
        return timed


class _Noop:
    def noop(self, x: Any = None) -> None:
        return None


def overhead_ns(n: int = 100_000) -> Tuple[float, float]:
    """(wall, CPU) ns that one wrapped no-op call adds to ``ns`` / ``cpu_ns``: the timer's
    own share of every outer call, the median of 5 rounds."""
    import statistics

    wall, cpu = [], []
    for _ in range(5):
        obj = _Noop()
        t = CacheWorkTimer(obj, ["noop"])
        f = obj.noop
        for _ in range(n):
            f(1)
        wall.append(t.ns / n)
        cpu.append(t.cpu_ns / n)
    return statistics.median(wall), statistics.median(cpu)
