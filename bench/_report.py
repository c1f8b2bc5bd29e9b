"""Side-by-side table, target checks, JSON and PNG chart for the cache benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

LABELS = {
    "radixkv": "radixkv",
    "sglang-urc-rust": "SGLang UnifiedRadixCache (Rust core)",
    "sglang-radix": "SGLang RadixCache (Python)",
    "sglang-urc-py": "SGLang UnifiedRadixCache (Python core)",
    "vllm": "vLLM KVCacheManager",
    "vllm-xxhash": "vLLM KVCacheManager (xxhash)",
}
REFERENCE = "sglang-urc-rust"  # the cache radixkv must beat tenfold
HIT_TOLERANCE = 1e-9


def _index(rows: List[Dict[str, Any]]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {(r["trace"], r["system"]): r for r in rows}


def compare(radixkv: List[Dict[str, Any]], anchors: List[Dict[str, Any]],
            systems: List[str]) -> List[Dict[str, Any]]:
    """One row per trace: radixkv's numbers, each anchor's, and anchor_mean / radixkv_mean."""
    idx = _index(anchors)
    out = []
    for r in radixkv:
        row: Dict[str, Any] = {"trace": r["trace"], "radixkv": {
            k: r[k] for k in ("mean_us", "p50_us", "p99_us", "hit_rate", "evicted_tokens",
                              "admission_retries")}}
        for s in systems:
            a = idx.get((r["trace"], s))
            if a is None:
                continue
            row[s] = {k: a[k] for k in ("mean_us", "p50_us", "p99_us", "hit_rate",
                                        "evicted_tokens")}
            row[s]["speedup_mean"] = a["mean_us"] / r["mean_us"]
            row[s]["speedup_p99"] = a["p99_us"] / r["p99_us"]
        ref = idx.get((r["trace"], REFERENCE))
        if ref is not None:
            row["hit_rate_equal_to_sglang"] = abs(ref["hit_rate"] - r["hit_rate"]) <= HIT_TOLERANCE
            row["evicted_equal_to_sglang"] = ref["evicted_tokens"] == r["evicted_tokens"]
        out.append(row)
    return out


def targets(comp: List[Dict[str, Any]], radixkv: List[Dict[str, Any]],
            memory: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The issue's four targets, each with the measured value and pass / fail."""
    res: List[Dict[str, Any]] = []
    for row in comp:
        if REFERENCE in row:
            x = row[REFERENCE]["speedup_mean"]
            res.append({"target": f"{row['trace']}: >= 10x SGLang Rust-cored mean",
                        "value": f"{x:.1f}x", "ok": x >= 10.0})
    by = {r["trace"]: r for r in radixkv}
    if "chat" in by:
        p = by["chat"]["p99_us"]
        res.append({"target": "chat: p99 <= 25 us/request (with the Python call)",
                    "value": f"{p:.1f} us", "ok": p <= 25.0})
        if "floor_p99_us" in by["chat"]:
            f = by["chat"]["floor_p99_us"]
            res.append({"target": "chat: the same, on each request's fastest repeat (noise floor)",
                        "value": f"{f:.1f} us", "ok": f <= 25.0})
    if "chat" in by and "chat_evict" in by:
        a, b = by["chat_evict"]["mean_us"], by["chat"]["mean_us"]
        res.append({"target": "chat_evict mean <= chat mean",
                    "value": f"{a:.2f} vs {b:.2f} us", "ok": a <= b})
    for m in memory:
        bpt = bytes_per_token(m)
        if bpt is not None:
            res.append({"target": f"{m['trace']}: <= 12 bytes per cached token beyond the KV",
                        "value": f"{bpt[0]:.2f} B ({bpt[1]})", "ok": bpt[0] <= 12.0})
    return res


def bytes_per_token(m: Dict[str, Any]) -> Optional[Tuple[float, str]]:
    """The measured heap growth (allocator overhead included), else the cache's own estimate."""
    if "heap_bytes_per_token" in m:
        return m["heap_bytes_per_token"], "heap growth"
    if "self_reported" in m:
        return m["self_reported"]["bytes_per_token"], m["self_reported"]["attribute"]
    if "rss_bytes_per_token" in m:
        return m["rss_bytes_per_token"], "RSS growth"
    return None


def _cell(d: Optional[Dict[str, Any]], ratio: bool = True) -> str:
    if d is None:
        return "—"
    s = f"{d['mean_us']:.1f} ({d['p99_us']:.1f})"
    if ratio and "speedup_mean" in d:
        s += f" **{d['speedup_mean']:.1f}x**"
    return s


def table(comp: List[Dict[str, Any]], systems: List[str]) -> str:
    """Markdown: mean (p99) µs per request; bold = anchor mean / radixkv mean."""
    head = ["trace", "radixkv"] + [LABELS.get(s, s) for s in systems] + [
        "hit rate radixkv / SGLang", "evicted radixkv / SGLang"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for row in comp:
        ref = row.get(REFERENCE)
        r = row["radixkv"]
        hit = f"{r['hit_rate']:.4f} / " + (f"{ref['hit_rate']:.4f}" if ref else "—")
        if ref and not row.get("hit_rate_equal_to_sglang", True):
            hit += " **DIFFERS**"
        ev = f"{r['evicted_tokens']} / " + (f"{ref['evicted_tokens']}" if ref else "—")
        cells = [row["trace"], _cell(r, ratio=False)] + [_cell(row.get(s)) for s in systems]
        lines.append("| " + " | ".join(cells + [hit, ev]) + " |")
    return "\n".join(lines)


def variant_line(variant: List[Dict[str, Any]], anchors: List[Dict[str, Any]],
                 split: bool) -> str:
    """One line for the replay with the other prompt-split setting."""
    if not variant:
        return ""
    idx = _index(anchors)
    what = ("with SGLang's extra prompt-boundary insert at finish" if split
            else "without SGLang's prompt-boundary insert at finish")
    parts = []
    for r in variant:
        ref = idx.get((r["trace"], REFERENCE))
        ratio = f", {ref['mean_us'] / r['mean_us']:.1f}x" if ref else ""
        parts.append(f"{r['trace']} {r['mean_us']:.1f} ({r['p99_us']:.1f}{ratio})")
    return f"radixkv {what}, mean (p99, ratio to {LABELS[REFERENCE]}): " + "; ".join(parts) + "."


def floor_line(radixkv: List[Dict[str, Any]]) -> str:
    """radixkv's per-request minimum over the repeats (preemption filtered out)."""
    if not radixkv or "floor_mean_us" not in radixkv[0]:
        return ""
    parts = [f"{r['trace']} {r['floor_mean_us']:.1f} ({r['floor_p99_us']:.1f})" for r in radixkv]
    return ("radixkv noise floor, mean (p99) of each request's fastest repeat — a diagnostic for "
            "a shared machine, not comparable with the anchors' figures: " + "; ".join(parts) + ".")


def median_table(comp: List[Dict[str, Any]], systems: List[str]) -> str:
    """Median µs per request: less sensitive than the mean to a preempted request."""
    head = ["trace", "radixkv"] + [LABELS.get(s, s) for s in systems]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for row in comp:
        r = row["radixkv"]
        cells = [row["trace"], f"{r['p50_us']:.1f}"]
        for s in systems:
            a = row.get(s)
            cells.append(f"{a['p50_us']:.1f} ({a['p50_us'] / r['p50_us']:.1f}x)" if a else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def micro_table(micro: Dict[str, Any]) -> str:
    lines = ["| operation | median µs | p99 µs | note |", "|---|---:|---:|---|"]
    for group, d in micro.items():
        if "skipped" in d:
            lines.append(f"| {group} | — | — | skipped: {d['skipped']} |")
            continue
        for k, v in d.items():
            if isinstance(v, dict) and "median_us" in v:
                note = ""
                if group == "evict_10pct" and k == "evict":
                    note = (f"{d['evicted_tokens']} of {d['tree_tokens']} tokens, "
                            f"{d['ns_per_evicted_token']:.1f} ns/token")
                if group == "extend_metadata":
                    note = f"{d['requests']} requests x {d['context_tokens']} tokens"
                lines.append(f"| {group}: {k} | {v['median_us']:.1f} | {v['p99_us']:.1f} | "
                             f"{note} |")
    return "\n".join(lines)


def memory_table(memory: List[Dict[str, Any]]) -> str:
    lines = ["| trace | tree tokens | nodes | bytes/token (heap) | bytes/node beyond 8 B/token "
             "(heap) | bytes/token (RSS) | self-reported | pool bytes/slot (heap) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in memory:
        if "error" in m:
            lines.append(f"| {m['trace']} | error: {m['error']} | | | | | | |")
            continue
        own = m.get("self_reported")
        nodes = m.get("nodes")
        # key + slot are one int32 each: what is left over is per-node structure
        per_node = ((m["heap_tree_bytes"] - 8 * m["tree_tokens"]) / nodes
                    if nodes and "heap_tree_bytes" in m else float("nan"))
        lines.append(
            f"| {m['trace']} | {m['tree_tokens']} | {nodes if nodes else '—'} | "
            f"{m.get('heap_bytes_per_token', float('nan')):.2f} | {per_node:.0f}"
            f" | {m['rss_bytes_per_token']:.2f} | "
            + (f"{own['bytes_per_token']:.2f} ({own['attribute']})" if own else "—")
            + f" | {m.get('heap_pool_bytes_per_slot', float('nan')):.2f} |")
    return "\n".join(lines)


def anchor_memory_table(rows: List[Dict[str, Any]]) -> str:
    """The anchor's --memory results: Python heap (tracemalloc) plus value tensors for
    SGLang's Python tree; RSS growth (coarse) where the tree lives in native code."""
    lines = ["| system | trace | tree tokens | nodes | bytes/token | how |", "|---|---|---:|---:|---:|---|"]
    for m in rows:
        tok = m.get("tree_tokens") or 0
        if not tok:
            continue
        if m.get("tracemalloc_bytes", 0) > tok:  # over 1 B/token: the tree is Python objects
            b = m["tracemalloc_bytes"] + m.get("value_tensor_storage_bytes", 0)
            how = "tracemalloc + value tensor storage"
        else:
            b, how = m["rss_growth_bytes"], "RSS growth (native tree; coarse)"
        lines.append(f"| {LABELS.get(m['system'], m['system'])} | {m['trace']} | {tok} | "
                     f"{m.get('tree_nodes', '—')} | {b / tok:.1f} | {how} |")
    return "\n".join(lines)


def write_json(path: Path, payload: Dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False, default=str))
    tmp.replace(path)


def chart(path: Path, comp: List[Dict[str, Any]], systems: List[str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["radixkv"] + [s for s in systems if any(s in row for row in comp)]
    traces = [row["trace"] for row in comp]
    width = 0.8 / len(names)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8),
                                  gridspec_kw={"width_ratios": [3, 2]})
    for i, s in enumerate(names):
        means = [row[s]["mean_us"] if s in row else 0 for row in comp]
        p99s = [row[s]["p99_us"] if s in row else 0 for row in comp]
        xs = [t + (i - (len(names) - 1) / 2) * width for t in range(len(traces))]
        ax.bar(xs, means, width, label=LABELS.get(s, s))
        ax.scatter(xs, p99s, marker="_", color="black", s=120, zorder=3,
                   label="p99" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(traces)))
    ax.set_xticklabels(traces)
    ax.set_ylabel("µs of cache work per request (bar: mean, tick: p99)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", which="both", alpha=0.3)
    anchors = names[1:]
    w2 = 0.8 / max(1, len(anchors))
    for i, s in enumerate(anchors):
        ratios = [row[s]["speedup_mean"] if s in row else 0 for row in comp]
        xs = [t + (i - (len(anchors) - 1) / 2) * w2 for t in range(len(traces))]
        ax2.bar(xs, ratios, w2, label=f"vs {LABELS.get(s, s)}", color=f"C{i + 1}")
    ax2.axhline(10, color="red", linestyle="--", linewidth=1, label="10x target")
    ax2.set_yscale("log")  # one stalled anchor run can be 100x off; keep the 10x line readable
    ax2.set_xticks(range(len(traces)))
    ax2.set_xticklabels(traces)
    ax2.set_ylabel("speed-up of radixkv (anchor mean / radixkv mean)")
    ax2.legend(fontsize=7)
    ax2.grid(axis="y", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
