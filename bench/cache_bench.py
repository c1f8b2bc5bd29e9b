"""Cache speed, side by side: radixkv vs SGLang's and vLLM's prefix caches (issue 3).

One command replays the four serving traces of the benchmark kit's
``bench/cache_traces.py`` (chat, few-shot, tree search, chat at 25% capacity; the
kit is described in bench/README.md) through radixkv with the scheduler protocol
that the kit's ``bench/cache_anchor_bench.py`` documents (see
``_replay.py``), runs that anchor script in its own venv for SGLang 0.5.23
(UnifiedRadixCache with its Rust core, the Python RadixCache) and vLLM 0.33
(KVCacheManager) on the same traces, and reports per trace the mean and p99 µs
of cache work per request, the prefix hit rate (checked equal to SGLang's), the
tokens evicted and the ratios. It also times single operations (32K-token match,
metadata for 256 x 4K requests, evicting 10% of a million-token tree) and
measures bookkeeping bytes per cached token.

Usage (from the repository root, radixkv built into .venv with maturin):
    python bench/cache_bench.py                       # everything, 5 repeats
    python bench/cache_bench.py --traces chat --repeats 1 --no-anchors --no-micro
    python bench/cache_bench.py --anchor-json old.json    # reuse a saved anchor run

Writes bench/results/cache_bench.{md,json,png}. Needs bench/setup_anchors.sh's
venv (.venv-anchors) unless --no-anchors / --anchor-json is given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _anchors  # noqa: E402
import cache_bench_sglang  # noqa: E402
import _memory  # noqa: E402
import _micro  # noqa: E402
import _paged  # noqa: E402
import _profile  # noqa: E402
import _replay  # noqa: E402
import _report  # noqa: E402
import _traces  # noqa: E402


def _log(msg: str) -> None:
    print(msg, flush=True)


def _loadavg() -> List[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(_traces.REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def _import_radixkv() -> Any:
    try:
        import radixkv as rk
    except ImportError as e:
        raise SystemExit(f"cache_bench: cannot import radixkv ({e}); build it into the venv "
                         "with `maturin develop --release`") from e
    missing = [n for n in ("TokenPool", "RadixCache") if not hasattr(rk, n)]
    if missing:
        raise SystemExit(f"cache_bench: this radixkv build lacks {missing}")
    return rk


def _events_table(off: List[Dict[str, Any]], on: List[Dict[str, Any]],
                  anchors: List[Dict[str, Any]]) -> str:
    """Mean µs per request with events off and on, and SGLang's Rust-cored cache over each."""
    urc = {r["trace"]: r["mean_us"] for r in anchors if r["system"] == "sglang-urc-rust"}
    lines = ["| trace | events off µs | events on µs | SGLang URC (Rust) µs | ratio off | "
             "ratio on |", "|---|---:|---:|---:|---:|---:|"]
    for a, b in zip(off, on):
        s = urc.get(a["trace"])
        ratio = (lambda x: f"**{s / x:.1f}x**") if s else (lambda x: "n/a")
        lines.append(f"| {a['trace']} | {a['mean_us']:.2f} | {b['mean_us']:.2f} | "
                     f"{s if s is None else round(s, 1)} | {ratio(a['mean_us'])} | "
                     f"{ratio(b['mean_us'])} |")
    return "\n".join(lines)


def _plugin_table(plugin: Dict[str, Any]) -> str:
    """Through SGLang's request lifecycle, the plugin vs SGLang's UnifiedRadixCache (Rust core):
    the cache work (time inside the cache object's methods) and the whole lifecycle, events off
    and on, with the ratio URC / plugin of each."""
    rows = plugin.get("rows", [])
    by = {(r["trace"], r["system"]): r for r in rows}
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    lines = ["| trace | events | plugin cache work µs: mean / floor / CPU | URC cache work µs: "
             "mean / floor / CPU | **URC / plugin** mean / floor / CPU | less SGLang's allocator "
             "mean | whole lifecycle µs plugin / URC | lifecycle ratio | hit plugin / URC |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(u: Any, p: Any, k: str) -> str:
        return f"{u[k] / p[k]:.1f}x"

    for t in traces:
        for label, mine, ref in (("off", "radixkv-plugin", "sglang-urc-rust"),
                                 ("on", "radixkv-plugin+events", "sglang-urc-rust+events")):
            p, u = by.get((t, mine)), by.get((t, ref))
            if p is None or u is None:
                continue
            work = lambda r: (f"{r['work_mean_us']:.1f} / {r['work_floor_mean_us']:.1f} / "
                              f"{r['work_cpu_mean_us']:.1f}")  # noqa: E731
            lines.append(
                f"| {t} | {label} | {work(p)} | {work(u)} | **{ratio(u, p, 'work_mean_us')}** / "
                f"{ratio(u, p, 'work_floor_mean_us')} / {ratio(u, p, 'work_cpu_mean_us')} | "
                f"{ratio(u, p, 'own_mean_us')} | {p['mean_us']:.1f} / {u['mean_us']:.1f} | "
                f"{ratio(u, p, 'mean_us')} | {p['hit_rate']:.4f} / {u['hit_rate']:.4f} |")
    return "\n".join(lines)


def _plugin_targets(plugin: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Issue 15's target through the plugin: SGLang URC's cache work per request >= 10x the
    plugin's, events off and on, by the mean (the kit's statistic); floor and CPU shown."""
    by = {(r["trace"], r["system"]): r for r in plugin.get("rows", [])}
    out = []
    for t in dict.fromkeys(r["trace"] for r in plugin.get("rows", [])):
        for label, mine, ref in (("off", "radixkv-plugin", "sglang-urc-rust"),
                                 ("on", "radixkv-plugin+events", "sglang-urc-rust+events")):
            p, u = by.get((t, mine)), by.get((t, ref))
            if p is None or u is None:
                continue
            r = [u[k] / p[k] for k in ("work_mean_us", "work_floor_mean_us", "work_cpu_mean_us")]
            out.append({"target": f"cache work through the plugin, URC / plugin >= 10x ({t}, "
                                  f"events {label}; mean / floor / CPU)",
                        "value": " / ".join(f"{x:.1f}x" for x in r), "ok": r[0] >= 10})
    return out


def _page_hits_table(paged: List[Dict[str, Any]], plugin: Dict[str, Any], page: int) -> str:
    """Hit rates at page 1 and page ``page``: SGLang's own RadixCache and the plugin through
    SGLang's lifecycle (which also inserts the prompt after prefill), next to radixkv's
    ``_paged.py`` replay (inserts at finish only)."""
    hits = {(h["trace"], h["system"], h["page_size"]): h["hit_rate"]
            for h in plugin.get("page_hits", [])}
    lines = [f"| trace | SGLang page 1 | SGLang page {page} | plugin page 1 | plugin page {page} | "
             f"radixkv page 1 | radixkv page {page} + partial pages | gap to page 1 | "
             "SGLang gap |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.4f}"

    for r in paged:
        t = r["trace"]
        s1, sp = hits.get((t, "sglang-radix", 1)), hits.get((t, "sglang-radix", page))
        p1, pp = hits.get((t, "radixkv-plugin", 1)), hits.get((t, "radixkv-plugin", page))
        m1, mp = r.get("hit_page1"), r.get(f"hit_page{page}_partial")
        gap = "-" if m1 is None or mp is None else f"{(mp - m1) * 100:+.2f} pp"
        sgap = "-" if s1 is None or sp is None else f"{(sp - s1) * 100:+.2f} pp"
        lines.append(f"| {t} | {f(s1)} | {f(sp)} | {f(p1)} | {f(pp)} | {f(m1)} | {f(mp)} | "
                     f"{gap} | {sgap} |")
    return "\n".join(lines)


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="all", help="comma list or 'all'")
    ap.add_argument("--repeats", type=int, default=5, help="median over this many replays")
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--shared", default=None,
                    help=f"the benchmark kit's folder (default ${_traces.SHARED_ENV})")
    ap.add_argument("--trace-dir", default=None, help="read <trace>.jsonl from here")
    ap.add_argument("--anchors-python", default=None,
                    help=f"anchors' interpreter (default ${_anchors.ANCHORS_PYTHON_ENV} "
                         "or .venv-anchors/bin/python)")
    ap.add_argument("--anchor-systems", default=",".join(_anchors.DEFAULT_SYSTEMS))
    ap.add_argument("--anchor-json", default=None, help="reuse this saved anchor --json run")
    ap.add_argument("--no-anchors", action="store_true")
    ap.add_argument("--no-micro", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-events", action="store_true",
                    help="skip the replay with KV events on (drained every request)")
    ap.add_argument("--no-plugin", action="store_true",
                    help="skip the SGLang-plugin replay (cache_bench_sglang.py in the anchors' "
                         "venv) and SGLang's paged hit rates")
    ap.add_argument("--plugin-repeats", type=int, default=3)
    ap.add_argument("--plugin-traces", default="all",
                    help="comma list or 'all': traces for the plugin stage (SGLang's request "
                         "lifecycle is the slow part; tree has 5440 requests)")
    ap.add_argument("--no-paged", action="store_true",
                    help="skip the page-1 / page-16 / page-16 + partial pages hit rates")
    ap.add_argument("--page", type=int, default=16, help="page size of the paged hit rates")
    ap.add_argument("--kv-bytes-per-token", type=int, default=131072,
                    help="K+V bytes per token for the copied-bytes column (Llama-3-8B bf16)")
    ap.add_argument("--anchor-memory", action="store_true",
                    help="also run the anchor's --memory report for SGLang (about 3 min)")
    ap.add_argument("--no-breakdown", action="store_true",
                    help="skip the instrumented pass that times each cache call")
    ap.add_argument("--split-prompt", action="store_true",
                    help="add SGLang's prompt-boundary insert at finish to radixkv's protocol")
    ap.add_argument("--no-variant", action="store_true",
                    help="skip the replay of the other --split-prompt setting")
    ap.add_argument("--check", action="store_true",
                    help="cache.check() after every admission (debug; not for timing)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a hit rate differs from SGLang's")
    ap.add_argument("--out", default=str(_traces.REPO / "bench" / "results"))
    ap.add_argument("--name", default="cache_bench", help="output file stem")
    ap.add_argument("--replot", default=None, metavar="JSON",
                    help="only redraw the PNG from a saved cache_bench JSON")
    return ap.parse_args(argv)


def main(argv: List[str]) -> int:
    a = parse_args(argv)
    if a.replot:
        import json

        saved = json.loads(Path(a.replot).read_text())
        comp_saved = saved["comparison"]
        shown = [s for s in _anchors.DEFAULT_SYSTEMS + tuple(a.anchor_systems.split(","))
                 if any(s in row for row in comp_saved)]
        shown = list(dict.fromkeys(shown))
        png = Path(a.replot).with_suffix(".png")
        _report.chart(png, comp_saved, shown,
                      f"Prefix-cache work per request, {saved['info']['date_utc']} "
                      f"({saved['info']['max_running']} in flight, median of "
                      f"{saved['info']['repeats']})")
        _log(f"wrote {png}")
        return 0
    shared = _traces.shared_dir(a.shared)
    rk = _import_radixkv()
    names = list(_traces.trace_names(shared)) if a.traces == "all" else a.traces.split(",")
    systems = [s for s in a.anchor_systems.split(",") if s]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    info: Dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/cache_bench.py " + " ".join(argv),
        "git_commit": _git_commit(),
        "radixkv": getattr(rk, "__version__", "?"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_start": _loadavg(),
        "repeats": a.repeats,
        "max_running": a.max_running,
        "split_prompt": a.split_prompt,
    }

    anchors: Dict[str, Any] = {"results": []}
    if a.anchor_json:
        anchors = _anchors.load_anchor_json(a.anchor_json)
        info["anchors_from"] = a.anchor_json
    elif not a.no_anchors and systems:
        t0 = time.time()
        anchors = _anchors.run_anchors(shared, _anchors.anchors_python(a.anchors_python),
                                       systems, names, a.repeats, a.max_running, log=_log)
        info["anchors_s"] = round(time.time() - t0, 1)
        info["loadavg_after_anchors"] = _loadavg()

    plugin: Dict[str, Any] = {}
    if not a.no_plugin:
        t0 = time.time()
        plugin = cache_bench_sglang.run_in_subprocess(
            _anchors.anchors_python(a.anchors_python), shared,
            names if a.plugin_traces == "all" else a.plugin_traces.split(","), a.plugin_repeats,
            a.max_running, [] if a.no_paged else [1, a.page], log=_log)
        info["plugin_s"] = round(time.time() - t0, 1)

    _log("radixkv: loading traces")
    traces = [_traces.load_trace(shared, n, a.trace_dir) for n in names]
    caps = [_traces.capacity_tokens(shared, t, a.max_running) for t in traces]
    if a.check:
        for t, c in zip(traces, caps):
            _replay.replay(rk, t, c, a.max_running, a.split_prompt, check=True)
        _log("radixkv: check() passed after every admission on every trace")
    mine = _replay.run_radixkv(rk, traces, caps, a.repeats, a.max_running,
                               a.split_prompt, log=_log)
    variant: List[Dict[str, Any]] = []
    if not a.no_variant:
        _log(f"radixkv: variant with split_prompt={not a.split_prompt}")
        variant = _replay.run_radixkv(rk, traces, caps, a.repeats, a.max_running,
                                      not a.split_prompt, log=_log)
    with_events: List[Dict[str, Any]] = []
    if not a.no_events:
        _log("radixkv: replay with KV events on")
        with_events = _replay.run_radixkv(rk, traces, caps, a.repeats, a.max_running,
                                          a.split_prompt, log=_log, events=True)
    info["loadavg_after_radixkv"] = _loadavg()

    paged: List[Dict[str, Any]] = []
    if not a.no_paged:
        _log(f"radixkv: hit rates at page 1, page {a.page}, page {a.page} + partial pages")
        paged = _paged.run(rk, traces, caps, a.max_running, a.page, a.kv_bytes_per_token,
                           log=_log)

    breakdown: List[Dict[str, Any]] = []
    if not a.no_breakdown:
        for t, c, m in zip(traces, caps, mine):
            breakdown.append(_profile.breakdown(rk, t, c, a.max_running,
                                                a.split_prompt, m["mean_us"]))

    micro: Dict[str, Any] = {}
    if not a.no_micro:
        _log("radixkv: micro timings")
        micro["match_32k"] = _micro.match_32k(rk)
        micro["extend_metadata"] = _micro.extend_metadata(rk)
        micro["evict_10pct"] = _micro.evict_10pct(rk)

    memory: List[Dict[str, Any]] = []
    if not a.no_memory:
        _log("radixkv: bytes per cached token (one subprocess per trace)")
        memory = _memory.measure_in_subprocess(shared, [n for n in ("chat", "tree")
                                                        if n in names] or names[:1])

    anchor_mem: List[Dict[str, Any]] = []
    if a.anchor_memory and not a.no_anchors:
        mem_systems = [x for x in systems if x.startswith("sglang")]
        mem_traces = [n for n in ("chat", "tree") if n in names] or names[:1]
        anchor_mem = _anchors.run_anchors(shared, _anchors.anchors_python(a.anchors_python),
                                          mem_systems, mem_traces, 1, a.max_running,
                                          mode="memory", log=_log)["results"]

    present = [s for s in systems if any(r["system"] == s for r in anchors["results"])]
    comp = _report.compare(mine, anchors["results"], present)
    tgt = _report.targets(comp, mine, memory) + _plugin_targets(plugin)
    info["loadavg_end"] = _loadavg()

    md = [f"# radixkv cache benchmark ({info['date_utc']}, commit {info['git_commit']})", "",
          f"`{info['command']}` — {a.repeats} repeats (median), {a.max_running} requests in "
          f"flight, {info['cpus']} CPUs, load average {info['loadavg_start']} at start, "
          f"{info['loadavg_end']} at end.", "",
          "Mean (p99) µs of cache work per request; bold: anchor mean / radixkv mean.", "",
          _report.table(comp, present), "",
          _report.variant_line(variant, anchors["results"], not a.split_prompt), "",
          _report.floor_line(mine), "",
          "Median µs per request (ratio: anchor / radixkv):", "",
          _report.median_table(comp, present), ""]
    if with_events:
        md += ["## KV events on (every request drains `take_events()` inside its timed span)", "",
               _events_table(mine, with_events, anchors["results"]), ""]
    if plugin.get("rows"):
        md += ["## Through the SGLang plugin (SGLang's request lifecycle, same run)", "",
               "`bench/cache_bench_sglang.py` in the anchors' venv: real `Req` objects through "
               "SGLang 0.5.23's scheduler helpers on its CPU pools, the same driver for every "
               f"cache; systems in turn, {a.plugin_repeats} rounds after one untimed pass each. "
               "Cache work: wall time inside the cache object's methods (SGLang's "
               "`BasePrefixCache` surface, timed by one wrapper on every cache, outermost calls "
               "only; `bench/_call_timer.py`), per request: mean (median over rounds), floor "
               "(each request's least time over the rounds, averaged) and the thread's CPU "
               "time. Whole lifecycle: the admission and finish spans, SGLang's own `Req` and "
               "pool work included. Events on: SGLang's `--enable-kv-cache-events` on both, "
               "drained (`take_events`) every admission and finish inside the span.", "",
               _plugin_table(plugin), ""]
    if paged and plugin.get("page_hits"):
        md += [f"## Hit rate at page 1 and page {a.page}, SGLang next to radixkv (same run)", "",
               _page_hits_table(paged, plugin, a.page), "",
               "SGLang and the plugin: `cache_bench_sglang.py --page-hits` (SGLang's "
               "`PagedTokenToKVPoolAllocator`, partial pages dropped, prompt inserted after "
               "prefill and at finish); radixkv: `_paged.py` (below).", ""]
    if paged:
        md += [f"## Hit rate on a paged pool: page 1 vs page {a.page} vs page {a.page} with "
               "sub-page reuse", "",
               "`_paged.py`: the same scheduling, inserting at finish only; with partial pages "
               "a request reuses the tail of a cached page by copying it into a fresh page. "
               "SGLang, like radixkv without partial pages, drops every partial page (its "
               "page-16 hit rate: the table above, from the plugin run).", "",
               _paged.table(paged, a.page, a.kv_bytes_per_token), ""]
    if breakdown:
        md += ["## Where radixkv's time goes (3 instrumented passes, median per call)", "",
               _profile.table(breakdown), ""]
    if micro:
        md += ["## Single operations", "", _report.micro_table(micro), ""]
    if memory:
        md += ["## Bookkeeping bytes per cached token (beyond the KV)", "",
               _report.memory_table(memory), ""]
    if anchor_mem:
        md += ["SGLang, same run (`cache_anchor_bench.py --memory`):", "",
               _report.anchor_memory_table(anchor_mem), ""]
    md += ["## Targets", "", "| target | measured | met |", "|---|---:|---|"]
    md += [f"| {t['target']} | {t['value']} | {'yes' if t['ok'] else '**no**'} |" for t in tgt]
    text = "\n".join(md) + "\n"
    (out / f"{a.name}.md").write_text(text)
    _report.write_json(out / f"{a.name}.json", {
        "info": info, "anchors": anchors, "radixkv": mine, "radixkv_variant": variant,
        "radixkv_events": with_events, "paged": paged, "plugin": plugin,
        "comparison": comp,
        "breakdown": breakdown, "micro": micro, "memory": memory, "anchor_memory": anchor_mem,
        "targets": tgt})
    if comp:
        _report.chart(out / f"{a.name}.png", comp, present,
                      f"Prefix-cache work per request, {info['date_utc']} "
                      f"({a.max_running} in flight, median of {a.repeats})")
    _log("")
    _log(text)
    _log(f"wrote {out / (a.name + '.md')}, .json, .png")
    differs = [r["trace"] for r in comp if r.get("hit_rate_equal_to_sglang") is False]
    if differs:
        _log(f"WARNING: hit rate differs from SGLang's on {differs}")
        if a.strict:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
