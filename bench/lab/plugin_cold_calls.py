"""Probe: what `prefix_device_indices` costs hot and cold (caches flushed between calls).

Builds a tree of 300 paths sharing a 3,000-token prefix, then times (thread CPU time) the
plugin's read, ``torch.from_numpy(cache.path_slots(node, limit=n))``, with and without 8 MB
touched between calls, and ``torch.from_numpy`` of a fresh array alone. Run:
``python bench/lab/plugin_cold_calls.py``.
"""

from __future__ import annotations

import time

import numpy as np
import torch

import radixkv as rk


def main() -> None:
    rng = np.random.default_rng(0)
    cache = rk.RadixCache(None, 1, slot_dtype="int64", sglang_stamps=True)
    shared = rng.integers(0, 50000, 3000)
    nodes = []
    for i in range(300):
        toks = np.concatenate([shared, rng.integers(0, 50000, 500)]).astype(np.int64)
        nodes.append(cache.insert_node(toks, np.arange(i * 4000, i * 4000 + len(toks)))[1])
    junk = np.ones(8 << 20, dtype=np.uint8)

    def timed(call, cold: bool, reps: int = 200) -> float:
        total = 0
        for k in range(reps):
            if cold:
                junk[::64] += 1  # evicts the caches the call would otherwise find warm
            t0 = time.thread_time_ns()
            call(k)
            total += time.thread_time_ns() - t0
        return total / reps / 1e3

    for limit in (3000, 3400):
        for cold in (False, True):
            us = timed(lambda k: torch.from_numpy(cache.path_slots(nodes[k], limit=limit)), cold)
            print(f"path_slots(limit={limit}) + from_numpy {'cold' if cold else 'hot '}: {us:6.1f} us")
    for cold in (False, True):
        us = timed(lambda k: torch.from_numpy(np.empty(3000, dtype=np.int64)), cold)
        print(f"from_numpy of a fresh array alone      {'cold' if cold else 'hot '}: {us:6.1f} us")


if __name__ == "__main__":
    main()
