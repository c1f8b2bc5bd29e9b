"""bench/_gpu_timing.py's Timer.interleaved on a stand-in for torch's CUDA events (no GPU): every
compared call is timed once per rep, each rep starts with a different one, every call follows its
own flush, and each median comes from that call's own events."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _gpu_timing import Timer  # noqa: E402


class _Clock:
    """A log of what ran, and events whose elapsed time is the call's fixed cost."""

    def __init__(self, cost_ms: dict[str, float]) -> None:
        self.cost_ms = cost_ms
        self.log: list[str] = []
        self.current = ""

    def event(self, enable_timing: bool = False) -> SimpleNamespace:
        clock = self
        ev = SimpleNamespace(stamp=None)

        def record() -> None:
            clock.log.append("record")
            ev.stamp = (len(clock.log), clock.current)

        def elapsed_time(end: SimpleNamespace) -> float:
            name = end.stamp[1]
            assert end.stamp[0] > ev.stamp[0]
            return clock.cost_ms[name]

        ev.record = record
        ev.elapsed_time = elapsed_time
        return ev


def _timer(clock: _Clock) -> Timer:
    t = Timer.__new__(Timer)
    t.torch = SimpleNamespace(cuda=SimpleNamespace(Event=clock.event, synchronize=lambda: None))
    t.do_flush = lambda mode: clock.log.append(f"flush:{mode}")  # type: ignore[method-assign]
    return t


def _fn(clock: _Clock, name: str):
    def run() -> None:
        clock.current = name
        clock.log.append(f"run:{name}")

    return run


def test_interleaved_takes_turns_and_rotates_the_first() -> None:
    clock = _Clock({"a": 1.0, "b": 2.0, "c": 3.0})
    timer = _timer(clock)
    fns = {n: _fn(clock, n) for n in "abc"}
    times = timer.interleaved(fns, reps=6, use_graph=False, flush="clean", warmup=2)
    assert times == {"a": 1000.0, "b": 2000.0, "c": 3000.0}
    runs = [e.split(":")[1] for e in clock.log if e.startswith("run:")]
    warm, timed = runs[:6], runs[6:]
    assert warm == ["a", "a", "b", "b", "c", "c"]
    assert len(timed) == 18
    turns = [timed[3 * i:3 * i + 3] for i in range(6)]
    assert all(sorted(t) == ["a", "b", "c"] for t in turns)
    assert [t[0] for t in turns] == ["a", "b", "c", "a", "b", "c"]
    # Every timed call: flush, start event, the call, end event.
    body = clock.log[6:]
    for i in range(18):
        assert body[4 * i] == "flush:clean"
        assert body[4 * i + 1] == "record" and body[4 * i + 3] == "record"
        assert body[4 * i + 2].startswith("run:")


def test_interleaved_passes_the_flush_mode() -> None:
    clock = _Clock({"x": 0.5})
    timer = _timer(clock)
    assert timer.interleaved({"x": _fn(clock, "x")}, reps=3, use_graph=False, flush="write",
                             warmup=0) == {"x": 500.0}
    assert clock.log.count("flush:write") == 3
