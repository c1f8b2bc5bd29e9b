"""Hit rate on a paged pool: page 1, page 16, and page 16 with sub-page reuse.

The same scheduling as ``_replay.py`` (trace order, at most ``max_running`` in flight, the
oldest finishes first, admission retried after finishing the oldest when the pool is short),
on a ``TokenPool`` of ``page_size`` slots a page:

- admission matches the prompt one token short; with ``partial_pages`` the match also reports
  a tail (tokens after the whole-page match that equal the start of a cached page). The request
  then allocates a fresh first page, copies the tail's page into it (what ``ops.copy_blocks``
  does on the GPU; here counted, not performed) and reuses ``tail_length`` more tokens;
- it allocates whole pages for the rest of prompt + decode (``output_len - 1`` slots);
- at finish it inserts prompt + output[:-1] with its row of slots and frees what the tree did
  not take (duplicates, the unused end of its last page; with ``partial_pages`` the tree also
  takes the partial last page).

The hit rate is reused prompt tokens over prompt tokens, as in ``_replay.py``. Only hit rates,
copies and evictions are measured here; the timed comparison is ``_replay.py`` (page 1).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Dict, List

import numpy as np


@dataclass
class _Run:
    full: np.ndarray
    plen: int
    olen: int
    row: Any = None
    node: Any = None
    start: int = 0      # first row position the request owns (after the tree's path)
    end_alloc: int = 0  # row positions [start, end_alloc) are its own allocated pages


def replay_paged(rk: Any, trace: Any, capacity: int, page: int, partial: bool,
                 max_running: int = 16, check: bool = False) -> Dict[str, Any]:
    cap = capacity - capacity % page + (page if capacity % page else 0)
    pool = rk.TokenPool(cap, page_size=page)
    cache = rk.RadixCache(pool, partial_pages=partial)
    longest = max(len(r.prompt) + r.output_len for r in trace.requests)
    stats = {"matched": 0, "prompt": 0, "copies": 0, "copied_tokens": 0, "retries": 0,
             "skipped": 0}

    def admit(st: _Run) -> bool:
        m = cache.match_prefix(st.full[: st.plen - 1])
        pl, node = m.length, m.node
        cache.lock(node)
        k = m.tail_length if partial else 0
        if k:
            cache.lock(m.tail_node)  # the source page must survive our allocation
        kv = st.plen + st.olen - 1
        pages = -(-(kv - pl) // page)
        try:
            new = cache.alloc(pages * page)
        except rk.OutOfSlots:
            if k:
                cache.unlock(m.tail_node)
            cache.unlock(node)
            return False
        if k:
            cache.unlock(m.tail_node)  # copied: the request owns new[:page] now
            stats["copies"] += 1
            stats["copied_tokens"] += k
        row = np.zeros(pl + pages * page, dtype=np.int32)
        row[:pl] = m.slots
        row[pl:] = new
        st.row, st.node, st.start, st.end_alloc = row, node, pl, pl + pages * page
        stats["matched"] += pl + k
        stats["prompt"] += st.plen
        return True

    def finish(st: _Run) -> None:
        n = st.plen + st.olen - 1
        ret = cache.insert(st.full[:n], st.row[:n])
        usable = n - n % page
        # the tree took row[lo:hi]: from the first token it lacked to the end of what it
        # stores (whole pages, plus the partial last page with partial pages on)
        cached_to = n if (partial and ret < n) else usable
        lo = max(min(ret, cached_to), st.start)
        hi = max(cached_to, lo)
        own = np.concatenate([st.row[st.start:lo], st.row[hi:st.end_alloc]])
        if len(own):
            pool.free(own)
        cache.unlock(st.node)
        if check:
            cache.check()

    states = [_Run(np.asarray(r.prompt + r.output, dtype=np.int32), len(r.prompt), r.output_len)
              for r in trace.requests]
    running: deque[_Run] = deque()
    for st in states:
        if len(running) >= max_running:
            finish(running.popleft())
        while not admit(st):
            if not running:
                cache.evict(cache.evictable_size)
                if not admit(st):
                    stats["skipped"] += 1
                    st = None  # type: ignore[assignment]
                break
            stats["retries"] += 1
            finish(running.popleft())
        if st is not None and st.row is not None:
            running.append(st)
    while running:
        finish(running.popleft())
    cache.check()
    assert pool.num_out == 0, "the replay leaked slots"
    return {
        "trace": trace.name,
        "page_size": page,
        "partial_pages": partial,
        "hit_rate": stats["matched"] / max(1, stats["prompt"]),
        "copies": stats["copies"],
        "copied_tokens": stats["copied_tokens"],
        "evicted_tokens": int(cache.evicted_tokens),
        "retries": stats["retries"],
        "skipped": stats["skipped"],
        "capacity_tokens": cap,
        "longest": longest,
    }


def run(rk: Any, traces: List[Any], caps: List[int], max_running: int, page: int = 16,
        kv_bytes_per_token: int = 131072, log: Any = None) -> List[Dict[str, Any]]:
    """Per trace: page 1, page ``page``, page ``page`` with partial pages."""
    out = []
    for t, c in zip(traces, caps):
        p1 = replay_paged(rk, t, c, 1, False, max_running)
        pp = replay_paged(rk, t, c, page, False, max_running)
        ps = replay_paged(rk, t, c, page, True, max_running)
        row = {
            "trace": t.name,
            "hit_page1": p1["hit_rate"],
            f"hit_page{page}": pp["hit_rate"],
            f"hit_page{page}_partial": ps["hit_rate"],
            "gap_partial": p1["hit_rate"] - ps["hit_rate"],
            "copies": ps["copies"],
            "copied_tokens": ps["copied_tokens"],
            # copy_blocks copies whole pages: bytes = pages x page x K+V bytes per token
            "copied_bytes": ps["copies"] * page * kv_bytes_per_token,
            "evicted": {"page1": p1["evicted_tokens"], f"page{page}": pp["evicted_tokens"],
                        f"page{page}_partial": ps["evicted_tokens"]},
            "skipped": [p1["skipped"], pp["skipped"], ps["skipped"]],
        }
        out.append(row)
        if log:
            log(f"{t.name:10s} hit page1 {p1['hit_rate']:.4f} page{page} {pp['hit_rate']:.4f} "
                f"page{page}+partial {ps['hit_rate']:.4f} copies {ps['copies']} "
                f"({ps['copied_tokens']} tokens)")
    return out


def table(rows: List[Dict[str, Any]], page: int, kv_bytes_per_token: int) -> str:
    lines = [f"| trace | hit page 1 | hit page {page} | hit page {page} + partial pages | "
             "gap to page 1 | page copies (tokens reused) | copied bytes* |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['hit_page1']:.4f} | {r[f'hit_page{page}']:.4f} | "
            f"{r[f'hit_page{page}_partial']:.4f} | {100 * r['gap_partial']:+.2f} pp | "
            f"{r['copies']} ({r['copied_tokens']}) | {r['copied_bytes'] / 2**20:.1f} MiB |")
    lines.append("")
    lines.append(f"*copied bytes assume {kv_bytes_per_token} bytes of K+V per token (Llama-3-8B: "
                 "32 layers x 8 KV heads x 128 x 2 x bf16) and whole-page copies.")
    return "\n".join(lines)
