"""Bytes of bookkeeping per cached token: what the radix tree holds beyond the KV itself.

Run in a fresh subprocess per trace so earlier allocations do not blur the numbers:
the pool and the cache are created first, every request's token array is built,
then the whole trace's sequences (prompt + output[:-1], what a finished request
leaves) are matched, allocated and inserted with an unbounded pool. Reported:

- ``heap``: growth of the C heap in use (glibc ``mallinfo2``: ``uordblks + hblkhd``);
  the Rust core allocates through the system allocator, so this is the tree's
  memory, plus anything Python allocated through malloc and still holds (an upper
  bound; the token arrays are built before the first reading);
- ``rss``: growth of the resident set, a coarser cross-check;
- the cache's own byte count when the build exposes one (``memory_bytes`` or
  similar).

Per-token figures divide by ``cache.total_size`` after the build. The pool's own
free list is reported apart (``pool_*``): it is per slot, not per cached token.

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

import numpy as np

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


def measure(rk: Any, trace: Any) -> Dict[str, Any]:
    seqs = [np.asarray(r.prompt + r.output[:-1], dtype=np.int32) for r in trace.requests]
    capacity = int(trace.meta["kept_tokens"]) + 4096
    gc.collect()
    h0, r0 = _heap_in_use(), _rss()
    pool = rk.TokenPool(capacity)
    gc.collect()
    h1, r1 = _heap_in_use(), _rss()
    cache = rk.RadixCache(pool)
    for s in seqs:
        m = cache.match_prefix(s)
        if m.length < len(s):
            cache.insert(s, np.concatenate([m.slots, cache.alloc(len(s) - m.length)]))
        del m
    gc.collect()
    h2, r2 = _heap_in_use(), _rss()
    tokens = int(cache.total_size)
    out: Dict[str, Any] = {
        "trace": trace.name,
        "tree_tokens": tokens,
        "kept_tokens_expected": int(trace.meta["kept_tokens"]),
        "pool_slots": capacity,
        "rss_tree_bytes": r2 - r1,
        "rss_bytes_per_token": (r2 - r1) / tokens,
        "rss_pool_bytes_per_slot": (r1 - r0) / capacity,
    }
    if h0 is not None and h1 is not None and h2 is not None:
        out.update(heap_tree_bytes=h2 - h1, heap_bytes_per_token=(h2 - h1) / tokens,
                   heap_pool_bytes_per_slot=(h1 - h0) / capacity)
    own = _self_count(cache)
    if own is not None:
        out["self_reported"] = dict(own, bytes_per_token=own["bytes"] / tokens)
    for name in ("num_nodes", "node_count"):
        if hasattr(cache, name):
            v = getattr(cache, name)
            out["nodes"] = int(v() if callable(v) else v)
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
    print(json.dumps(measure(rk, _traces.load_trace(shared, a.trace))))


if __name__ == "__main__":
    main()
