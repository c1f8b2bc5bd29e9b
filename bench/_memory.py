"""Bytes of bookkeeping per cached token: what the radix tree holds beyond the KV itself.

Run in a fresh subprocess per trace so earlier allocations do not blur the numbers:
the trace is replayed exactly as in the timed benchmark (same driver, same pool size,
so the tree ends with the same nodes as SGLang's after its replay: the insert after
prefill already puts a node boundary at the end of every prompt); the heap is read once the pool, the request rows and every request's
token arrays exist, and again after the last request finished. Reported:

- ``heap``: growth of the C heap in use (glibc ``mallinfo2``: ``uordblks + hblkhd``);
  the Rust core allocates through the system allocator, so this is the tree's
  memory, plus anything Python allocated through malloc and still holds (an upper
  bound; the token arrays are built before the first reading);
- ``rss``: growth of the resident set, a coarser cross-check;
- the cache's own byte count when the build exposes one (``memory_bytes`` or
  similar).

Per-token figures divide by ``cache.total_size`` at the end. The pool's own state is
reported apart (``pool_*``, from a probe pool of the same size): it is per slot, not
per cached token.

Usage: python bench/_memory.py TRACE [--shared DIR]   (prints one JSON line)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional


HERE = Path(__file__).resolve().parent
SELF_COUNT_NAMES = ("memory_bytes", "heap_bytes", "nbytes", "bytes_used", "memory_usage")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


def _heap_in_use() -> Optional[int]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    mi = fn()
    return int(mi.uordblks + mi.hblkhd)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _self_count(cache: Any) -> Optional[Dict[str, int]]:
    for name in SELF_COUNT_NAMES:
        if hasattr(cache, name):
            v = getattr(cache, name)
            v = v() if callable(v) else v
            return {"attribute": name, "bytes": int(v)}  # type: ignore[dict-item]
    return None


def measure(rk: Any, trace: Any, shared: Path, max_running: int = 16) -> Dict[str, Any]:
    import _replay
    import _traces

    capacity = _traces.capacity_tokens(shared, trace, max_running)
    gc.collect()
    h0, r0 = _heap_in_use(), _rss()
    probe = rk.TokenPool(capacity)
    gc.collect()
    h1, r1 = _heap_in_use(), _rss()
    del probe
    marks: Dict[str, Any] = {}

    def before(drv: Any) -> None:
        gc.collect()
        marks["h"], marks["r"] = _heap_in_use(), _rss()

    def after(drv: Any) -> None:
        gc.collect()
        marks["h2"], marks["r2"] = _heap_in_use(), _rss()
        marks["tokens"] = int(drv.cache.total_size)
        marks["self"] = _self_count(drv.cache)
        for name in ("num_nodes", "node_count"):
            if hasattr(drv.cache, name):
                v = getattr(drv.cache, name)
                marks["nodes"] = int(v() if callable(v) else v)

    res = _replay.replay(rk, trace, capacity, max_running, before_loop=before, after_loop=after)
    tokens = marks["tokens"]
    out: Dict[str, Any] = {
        "trace": trace.name,
        "tree_tokens": tokens,
        "kept_tokens_expected": int(trace.meta["kept_tokens"]),
        "evicted_tokens": res.evicted_tokens,
        "pool_slots": capacity,
        "rss_tree_bytes": marks["r2"] - marks["r"],
        "rss_bytes_per_token": (marks["r2"] - marks["r"]) / tokens,
        "rss_pool_bytes_per_slot": (r1 - r0) / capacity,
    }
    if h0 is not None and h1 is not None and marks["h"] is not None:
        out.update(heap_tree_bytes=marks["h2"] - marks["h"],
                   heap_bytes_per_token=(marks["h2"] - marks["h"]) / tokens,
                   heap_pool_bytes_per_slot=(h1 - h0) / capacity)
    if marks.get("self") is not None:
        own = marks["self"]
        out["self_reported"] = dict(own, bytes_per_token=own["bytes"] / tokens)
    if "nodes" in marks:
        out["nodes"] = marks["nodes"]
    return out


def measure_in_subprocess(shared: Path, traces: List[str],
                          python: Optional[str] = None) -> List[Dict[str, Any]]:
    res = []
    for t in traces:
        cp = subprocess.run([python or sys.executable, str(HERE / "_memory.py"), t,
                             "--shared", str(shared)], capture_output=True, text=True)
        if cp.returncode != 0:
            res.append({"trace": t, "error": cp.stderr.strip().splitlines()[-1:]})
        else:
            res.append(json.loads(cp.stdout.strip().splitlines()[-1]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description="radixkv bytes per cached token")
    ap.add_argument("trace")
    ap.add_argument("--shared", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import _traces
    import radixkv as rk

    shared = _traces.shared_dir(a.shared)
    print(json.dumps(measure(rk, _traces.load_trace(shared, a.trace), shared)))


if __name__ == "__main__":
    main()
