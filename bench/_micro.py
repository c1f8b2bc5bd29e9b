"""Single-operation timings: long-prompt match, batch metadata, bulk eviction.

Each returns a dict of µs statistics over repeats, or ``{"skipped": reason}`` when
the radixkv build lacks the operation. Set-up (building trees, arrays) is untimed.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Dict, List

import numpy as np

VOCAB = 32000


def _stats(samples_ns: List[int]) -> Dict[str, float]:
    us = sorted(x / 1e3 for x in samples_ns)
    return {
        "n": len(us),
        "median_us": statistics.median(us),
        "mean_us": statistics.fmean(us),
        "p99_us": us[max(0, int(0.99 * len(us) + 0.999) - 1)],
        "min_us": us[0],
    }


def _time(fn: Callable[[], Any], repeats: int) -> List[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def match_32k(rk: Any, repeats: int = 300, seed: int = 1) -> Dict[str, Any]:
    """match_prefix / peek_prefix of a 32,768-token prompt that is fully cached.

    Two shapes of the same path: one node (a single insert), and 64 nodes (a
    conversation of 64 turns of 512 tokens, each turn also branching off a sibling,
    so every turn boundary is a node boundary).
    """
    rng = np.random.default_rng(seed)
    n = 32768
    prompt = rng.integers(0, VOCAB, n, dtype=np.int32)
    out: Dict[str, Any] = {"prompt_tokens": n}
    for shape in ("1 node", "64 nodes"):
        pool = rk.TokenPool(2 * n + 1024)
        cache = rk.RadixCache(pool)
        if shape == "1 node":
            cache.insert(prompt, cache.alloc(n))
        else:
            turn = n // 64
            for t in range(1, 65):
                end = t * turn
                m = cache.match_prefix(prompt[:end])
                cache.insert(prompt[:end], np.concatenate([m.slots, cache.alloc(end - m.length)]))
                side = prompt[:end].copy()
                side[-1] = (side[-1] + 1) % VOCAB  # a sibling branch: forces the boundary
                m = cache.match_prefix(side)
                cache.insert(side, np.concatenate([m.slots, cache.alloc(n and end - m.length)]))
        m = cache.match_prefix(prompt)
        assert m.length == n, (shape, m.length)
        out[f"match_prefix ({shape})"] = _stats(_time(lambda: cache.match_prefix(prompt), repeats))
        if hasattr(cache, "peek_prefix"):
            out[f"peek_prefix ({shape})"] = _stats(
                _time(lambda: cache.peek_prefix(prompt), repeats))
        m = cache.match_prefix(prompt)
        if hasattr(cache, "path_slots"):
            node = m.node
            out[f"path_slots ({shape})"] = _stats(_time(lambda: cache.path_slots(node), repeats))
    return out


def extend_metadata(rk: Any, repeats: int = 50, batch: int = 256, context: int = 4096,
                    extend: int = 512, seed: int = 2) -> Dict[str, Any]:
    """build_extend_metadata for ``batch`` requests of ``context`` tokens (prefix + extend).

    A NumPy build of the same seven arrays is timed alongside as a yardstick.
    """
    if not hasattr(rk, "build_extend_metadata"):
        return {"skipped": "radixkv has no build_extend_metadata in this build (helper R2's "
                           "metadata builders not merged yet)"}
    rng = np.random.default_rng(seed)
    prefix = [rng.integers(0, 1 << 20, context - extend, dtype=np.int32) for _ in range(batch)]
    new = [rng.integers(0, 1 << 20, extend, dtype=np.int32) for _ in range(batch)]
    md = rk.build_extend_metadata(prefix, new)
    want = np.concatenate([prefix[0], new[0]])
    got = np.asarray(md.kv_indices)[:context]
    assert np.array_equal(got, want), "build_extend_metadata: kv_indices of request 0 differ"

    def numpy_build() -> Any:
        ext = np.fromiter((len(x) for x in new), np.int32, batch)
        seq = ext + np.fromiter((len(x) for x in prefix), np.int32, batch)
        qo = np.zeros(batch + 1, np.int32)
        np.cumsum(ext, out=qo[1:])
        kv = np.zeros(batch + 1, np.int32)
        np.cumsum(seq, out=kv[1:])
        parts: List[np.ndarray] = []
        for p, q in zip(prefix, new):
            parts.append(p)
            parts.append(q)
        return qo, kv, np.concatenate(parts), seq, ext, seq - ext, qo[:-1]

    return {
        "requests": batch,
        "context_tokens": context,
        "extend_tokens": extend,
        "build_extend_metadata": _stats(
            _time(lambda: rk.build_extend_metadata(prefix, new), repeats)),
        "numpy yardstick": _stats(_time(numpy_build, repeats)),
    }


def evict_10pct(rk: Any, repeats: int = 5, seed: int = 3) -> Dict[str, Any]:
    """evict(10% of the tree) on a 1,048,576-token tree, all unlocked.

    64 shared prompts of 1,024 tokens, each with 128 continuations of 120 tokens
    (8,192 leaves), inserted in random order so LRU times are mixed. Each repeat
    rebuilds the tree; only the evict call is timed.
    """
    rng = np.random.default_rng(seed)
    roots, branches, root_len, leaf_len = 64, 128, 1024, 120
    total = roots * root_len + roots * branches * leaf_len
    seqs = []
    for r in range(roots):
        head = rng.integers(0, VOCAB, root_len, dtype=np.int32)
        head[0] = r  # distinct first tokens: no two prompts share a prefix by chance
        for b in range(branches):
            leaf = rng.integers(0, VOCAB, leaf_len, dtype=np.int32)
            leaf[0] = b
            seqs.append(np.concatenate([head, leaf]))
    order = list(range(len(seqs)))
    random.Random(seed).shuffle(order)
    target = total // 10
    samples, freed_counts, build_s = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pool = rk.TokenPool(total + 1024)
        cache = rk.RadixCache(pool)
        for i in order:
            s = seqs[i]
            m = cache.match_prefix(s)
            cache.insert(s, np.concatenate([m.slots, cache.alloc(len(s) - m.length)]))
        build_s.append(time.perf_counter() - t0)
        assert int(cache.total_size) == total, (int(cache.total_size), total)
        t0 = time.perf_counter_ns()
        freed = cache.evict(target)
        samples.append(time.perf_counter_ns() - t0)
        freed_counts.append(int(freed))
    st = _stats(samples)
    return {
        "tree_tokens": total,
        "leaves": roots * branches,
        "evict_request_tokens": target,
        "evicted_tokens": freed_counts[0],
        "evict": st,
        "ns_per_evicted_token": st["median_us"] * 1e3 / freed_counts[0],
        "tree_build_s (untimed, python loop)": statistics.median(build_s),
    }
