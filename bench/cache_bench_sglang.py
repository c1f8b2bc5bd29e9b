"""Cache work per request through the SGLang plugin, against SGLang's own caches, in one run.

Replays the serving traces of the benchmark kit's ``cache_traces.py`` (bench/README.md) with the
protocol of its ``cache_anchor_bench.py`` (requests in trace order, at most ``--max-running`` in
flight, the oldest finished before a new admission and on a failed admission, which is retried)
at the request level: real ``Req`` objects through SGLang 0.5.23's scheduler helpers on SGLang's
CPU pools (``_sglang_replay.Lifecycle``). The same driver and pools serve every system, so only
the tree cache differs:

    radixkv-plugin   radixkv.integrations.sglang.RadixKVPrefixCache (this repository)
    radixkv-plugin+events  the same with SGLang's --enable-kv-cache-events on, each admission
                     and finish draining ``take_events()`` inside its timed span
    sglang-urc-rust  UnifiedRadixCache, FULL component, Rust tree core (SGLang's default)
    sglang-urc-rust+events  the same with events on, drained the same way
    sglang-radix     RadixCache (SGLang's Python tree)

Two measures per request (admission plus finish, retries included):

- cache work: the time spent inside the cache object's methods, i.e. the calls SGLang's
  scheduler helpers, its allocator and the driver (``take_events``) make into it. One wrapper
  (``_call_timer.CacheWorkTimer``) goes on every system's cache instance, over SGLang's whole
  ``BasePrefixCache`` method surface, timing outermost calls only; wall time (mean per request,
  median over rounds; floor: each request's least time over the rounds, averaged) and the
  thread's CPU time. SGLang's allocator calls made from inside cache calls are also timed apart
  ("less allocator"), since that code is SGLang's whichever cache calls it.
- whole lifecycle: the admission and finish spans, SGLang's own ``Req`` and pool work included.

Systems run in turn, round by round, after one untimed pass each.

sglang-urc-rust needs torch 2.14.1 (``bench/setup_anchors.sh``'s venv with radixkv built into it):
in the torch 2.11 ``.venv`` SGLang's Rust tree core extension crashes the process (segfault,
seen on chat), so run it there or leave it out of ``--systems``.

Usage (radixkv built into the venv; ``make sglang-deps`` for SGLang):
    python bench/cache_bench_sglang.py --traces chat,fewshot --repeats 3
    # in the anchors' venv (torch 2.14.1), radixkv imported from the source tree:
    PYTHONPATH=python .venv-anchors/bin/python bench/cache_bench_sglang.py --json out.json \
        --page-hits 1,16

``--page-hits`` adds one untimed pass per page size for the hit rate alone (SGLang's
``PagedTokenToKVPoolAllocator`` above page 1; the KV pool rounded up to whole pages) for
``--hit-systems``. ``bench/cache_bench.py`` runs this script that way in the same run.

Prints per trace and system both measures, the hit rate, and the ratio of each SGLang cache's
numbers to the plugin's (events on against events on); ``--md`` writes them as a report.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import _traces  # noqa: E402
from _call_timer import CacheWorkTimer, overhead_ns, surface  # noqa: E402

SYSTEMS = ("radixkv-plugin", "radixkv-plugin+events", "sglang-radix", "sglang-urc-rust",
           "sglang-urc-rust+events")


def cache_factory(system: str) -> Callable[[Any], Any]:
    if system in ("radixkv-plugin", "radixkv-plugin+events"):
        from radixkv.integrations.sglang.cache import RadixKVPrefixCache

        if system == "radixkv-plugin":
            return RadixKVPrefixCache

        def with_events(params: Any) -> Any:
            params.enable_kv_cache_events = True
            return RadixKVPrefixCache(params)

        return with_events
    if system == "sglang-radix":
        from sglang.srt.mem_cache.radix_cache import RadixCache

        return RadixCache
    if system in ("sglang-urc-rust", "sglang-urc-rust+events"):
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        def make(params: Any) -> Any:
            params.enable_kv_cache_events = system.endswith("+events")
            params.tree_components = (ComponentType.FULL,)
            params.tree_core_backend = "rust"
            cache = UnifiedRadixCache(params)
            core = type(cache.tree_core).__name__
            if core != "RustUnifiedTreeCore":
                raise RuntimeError(f"sglang-urc-rust: SGLang fell back to {core}")
            return cache

        return make
    raise SystemExit(f"cache_bench_sglang: unknown system {system!r}")


def replay(system: str, trace: Any, capacity: int, max_running: int,
           page_size: int = 1, device: str = "cpu") -> Dict[str, Any]:
    from _sglang_replay import Lifecycle

    longest = max(len(r.prompt) + r.output_len for r in trace.requests)
    capacity = -(-capacity // page_size) * page_size
    lc = Lifecycle(cache_factory(system), capacity, max_running, longest + 8, page_size, device)
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache

    timer = CacheWorkTimer(lc.cache, surface(BasePrefixCache))
    # SGLang's allocator (frees of evicted, duplicate and released slots) timed apart inside
    # cache calls: the same code whichever cache calls it
    timer.watch_inner(lc.alloc, surface(type(lc.alloc), ()))
    drain = system.endswith("+events")
    events = 0
    reqs = [lc.make_req(str(r.id), r.prompt, r.output_len) for r in trace.requests]
    per = [0] * len(reqs)  # whole lifecycle span
    work = [0] * len(reqs)  # inside the cache object, within that span
    own = [0] * len(reqs)  # the same less the allocator calls the cache made
    cpu = [0] * len(reqs)  # the thread's CPU time inside the cache object
    own_cpu = [0] * len(reqs)  # the same less the allocator calls
    running: deque[int] = deque()
    clock = time.perf_counter_ns
    retries = 0

    def finish_oldest() -> None:
        nonlocal events
        j = running.popleft()
        lc.decode(reqs[j], trace.requests[j].output)  # untimed, as in the anchor
        w0, a0, c0, ac0 = timer.ns, timer.inner_ns, timer.cpu_ns, timer.inner_cpu_ns
        t0 = clock()
        lc.finish(reqs[j])
        if drain:
            events += len(lc.cache.take_events())
        per[j] += clock() - t0
        work[j] += timer.ns - w0
        own[j] += timer.ns - w0 - (timer.inner_ns - a0)
        cpu[j] += timer.cpu_ns - c0
        own_cpu[j] += timer.cpu_ns - c0 - (timer.inner_cpu_ns - ac0)

    gc.collect()
    t_start = clock()
    for i, req in enumerate(reqs):
        if len(running) >= max_running:
            finish_oldest()
        while True:
            w0, a0, c0, ac0 = timer.ns, timer.inner_ns, timer.cpu_ns, timer.inner_cpu_ns
            t0 = clock()
            ok = lc.admit(req, trace.requests[i].output_len)
            if drain:
                events += len(lc.cache.take_events())
            per[i] += clock() - t0
            work[i] += timer.ns - w0
            own[i] += timer.ns - w0 - (timer.inner_ns - a0)
            cpu[i] += timer.cpu_ns - c0
            own_cpu[i] += timer.cpu_ns - c0 - (timer.inner_cpu_ns - ac0)
            if ok:
                break
            if not running:
                raise RuntimeError(f"{system}: request {req.rid} cannot fit an empty pool")
            retries += 1
            finish_oldest()
        running.append(i)
    while running:
        finish_oldest()
    wall = (clock() - t_start) / 1e9
    calls = timer.calls
    by_name = {k: v for k, v in timer.by_name.items() if v[1]}
    # the plugin parks duplicate frees until an eviction or its bound: what is still parked
    # at the end is handed to the allocator here, timed, and charged to the run apart
    frees = getattr(lc.cache, "_frees", None)
    parked_end, handover_ns, handover_cpu_ns = 0, 0, 0
    if frees is not None:
        parked_end = frees.tokens
        c0, t0 = time.thread_time_ns(), clock()
        frees.flush()
        handover_ns, handover_cpu_ns = clock() - t0, time.thread_time_ns() - c0
    lc.leak_check()
    us = sorted(x / 1e3 for x in per)
    wus = sorted(x / 1e3 for x in work)
    ous = sorted(x / 1e3 for x in own)
    prompt_tokens = sum(len(r.prompt) for r in trace.requests)
    return {
        "system": system, "trace": trace.name, "wall_s": wall, "page_size": page_size,
        "events": events,
        "mean_us": statistics.fmean(us),
        "p99_us": us[max(0, math.ceil(0.99 * len(us)) - 1)],
        "work_mean_us": statistics.fmean(wus),
        "work_p99_us": wus[max(0, math.ceil(0.99 * len(wus)) - 1)],
        "work_cpu_mean_us": statistics.fmean(cpu) / 1e3,
        "alloc_calls": timer.inner_calls,
        "parked_end_tokens": parked_end,
        "handover_end_us": handover_ns / 1e3,
        "handover_end_cpu_us": handover_cpu_ns / 1e3,
        # cache work with the end's hand-over spread over the requests
        "work_handover_mean_us": (sum(work) + handover_ns) / len(reqs) / 1e3,
        "work_handover_cpu_mean_us": (sum(cpu) + handover_cpu_ns) / len(reqs) / 1e3,
        "own_cpu_mean_us": statistics.fmean(own_cpu) / 1e3,
        "own_mean_us": statistics.fmean(ous),
        "own_p99_us": ous[max(0, math.ceil(0.99 * len(ous)) - 1)],
        "work_calls_per_req": calls / len(reqs),
        "work_by_call_us": {k: v[0] / 1e3 / len(reqs) for k, v in sorted(by_name.items())},
        "work_calls_by_call": {k: v[1] for k, v in sorted(by_name.items())},
        "work_cpu_by_call_us": {k: v[2] / 1e3 / len(reqs) for k, v in sorted(by_name.items())},
        "_per_ns": per, "_work_ns": work, "_own_ns": own,
        "hit_rate": lc.matched / prompt_tokens, "retries": retries,
        "tree_tokens_end": lc.cache.evictable_size() + lc.cache.protected_size(),
    }


def run_in_subprocess(python: Path, shared: Path, traces: List[str], repeats: int,
                      max_running: int, pages: List[int], systems: str = ",".join(SYSTEMS),
                      log: Callable[[str], None] = print) -> Dict[str, Any]:
    """This script in another interpreter (the anchors' venv: SGLang's Rust core needs torch
    2.14), importing radixkv from this checkout's ``python/`` (the extension built there by
    ``maturin develop`` is abi3); returns its ``--json`` rows."""
    import json
    import subprocess
    import tempfile

    repo = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plugin.json"
        cmd = [str(python), str(Path(__file__).resolve()), "--shared", str(shared), "--traces",
               ",".join(traces), "--systems", systems, "--repeats", str(repeats),
               "--max-running", str(max_running), "--json", str(out)]
        if pages:
            cmd += ["--page-hits", ",".join(map(str, pages))]
        env = dict(os.environ, PYTHONPATH=str(repo / "python"))
        log("plugin: " + " ".join(cmd[1:]))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=str(repo))
        assert proc.stdout is not None
        for line in proc.stdout:
            log("  | " + line.rstrip("\n"))
        if proc.wait() != 0 or not out.exists():
            raise SystemExit(f"cache_bench: plugin benchmark failed (exit {proc.returncode})")
        data: Dict[str, Any] = json.loads(out.read_text())
    return data


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="all")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--device", default="cpu",
                    help="where SGLang's pools live (cuda: as a server keeps them)")
    ap.add_argument("--shared", default=None)
    ap.add_argument("--limit", default="",
                    help="replay only the first N requests: N (every trace) or TRACE=N,...")
    ap.add_argument("--page-hits", default="",
                    help="comma list of page sizes: one untimed pass each, hit rate only")
    ap.add_argument("--hit-systems", default="sglang-radix,radixkv-plugin")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--md", default=None,
                    help="also write a markdown report here (tables of bench/cache_bench.py)")
    a = ap.parse_args(argv)
    import _sglang_env

    _sglang_env.prepare()
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    shared = _traces.shared_dir(a.shared)
    names = list(_traces.trace_names(shared)) if a.traces == "all" else a.traces.split(",")
    systems = [s for s in a.systems.split(",") if s]
    limits = ({n: int(a.limit) for n in names} if a.limit.isdigit() else
              {k: int(v) for k, v in (x.split("=") for x in a.limit.split(",") if x)})
    rows: List[Dict[str, Any]] = []
    timer_ns, timer_cpu_ns = overhead_ns()
    loadavg = [os.getloadavg()]
    for name in names:
        trace = _traces.load_trace(shared, name)
        cap = _traces.capacity_tokens(shared, trace, a.max_running)
        if limits.get(name):
            trace.requests = trace.requests[: limits[name]]
        # one untimed pass each first (SGLang imports modules lazily on its first requests),
        # then the systems in turn, round by round, so a change in machine load falls on all
        for system in systems:
            replay(system, trace, cap, a.max_running, device=a.device)
        runs: Dict[str, List[Dict[str, Any]]] = {s: [] for s in systems}
        for _ in range(a.repeats):
            for system in systems:
                runs[system].append(replay(system, trace, cap, a.max_running, device=a.device))
        for system in systems:
            rows.append(median_row(runs[system]))
            med = rows[-1]
            print(f"{name:10s} {system:22s} cache work mean {med['work_mean_us']:8.1f} us "
                  f"floor {med['work_floor_mean_us']:7.1f} p99 {med['work_p99_us']:8.1f} "
                  f"cpu {med['work_cpu_mean_us']:7.1f} "
                  f"({med['work_calls_per_req']:.1f} calls, {med['alloc_calls']:.0f} allocator; "
                  f"{med['parked_end_tokens']:.0f} parked at end, handed over in "
                  f"{med['handover_end_cpu_us']:.0f} us CPU) | less allocator mean "
                  f"{med['own_mean_us']:7.1f} floor {med['own_floor_mean_us']:7.1f} cpu "
                  f"{med['own_cpu_mean_us']:7.1f} | lifecycle mean "
                  f"{med['mean_us']:8.1f} floor {med['floor_mean_us']:7.1f} p99 "
                  f"{med['p99_us']:8.1f} | hit {med['hit_rate']:.4f} retries {med['retries']}",
                  flush=True)
    loadavg.append(os.getloadavg())
    hits: List[Dict[str, Any]] = []
    pages = [int(x) for x in a.page_hits.split(",") if x]
    for name in names if pages else []:
        trace = _traces.load_trace(shared, name)
        cap = _traces.capacity_tokens(shared, trace, a.max_running)
        if limits.get(name):
            trace.requests = trace.requests[: limits[name]]
        for system in [s for s in a.hit_systems.split(",") if s]:
            for ps in pages:
                r = replay(system, trace, cap, a.max_running, ps)
                hits.append({k: r[k] for k in ("system", "trace", "page_size", "hit_rate",
                                               "retries")})
                print(f"{name:10s} {system:22s} page {ps:3d} hit {r['hit_rate']:.4f}  retries "
                      f"{r['retries']}", flush=True)
    if a.json:
        import json

        Path(a.json).write_text(json.dumps({"rows": rows, "page_hits": hits,
                                            "repeats": a.repeats, "limits": limits,
                                            "max_running": a.max_running,
                                            "timer_overhead_ns": timer_ns,
                                            "timer_overhead_cpu_ns": timer_cpu_ns,
                                            "loadavg": loadavg}, indent=1))
    if a.md:
        Path(a.md).write_text(markdown(rows, a, limits, timer_ns, timer_cpu_ns, loadavg, argv))
    print(f"\ntimer: {timer_ns:.0f} ns wall, {timer_cpu_ns:.0f} ns CPU per outer call on every "
          f"system alike (not subtracted); load average {loadavg}")
    print("ratio of each SGLang cache's µs per request to the plugin's (same run; events "
          "on: +events against +events), cache work / whole lifecycle:")
    by = {(r["trace"], r["system"]): r for r in rows}
    for name in names:
        for mine_name, others in (("radixkv-plugin", ("sglang-urc-rust", "sglang-radix")),
                                  ("radixkv-plugin+events", ("sglang-urc-rust+events",))):
            mine = by.get((name, mine_name))
            for o in others:
                r = by.get((name, o))
                if mine is None or r is None:
                    continue
                same = "same hit rate" if abs(r["hit_rate"] - mine["hit_rate"]) < 1e-9 else (
                    f"hit rate differs: {r['hit_rate']:.4f}")
                print(f"  {name:10s} {o:22s} / {mine_name:22s} mean "
                      f"{r['work_mean_us'] / mine['work_mean_us']:6.2f}x floor "
                      f"{r['work_floor_mean_us'] / mine['work_floor_mean_us']:6.2f}x cpu "
                      f"{r['work_cpu_mean_us'] / mine['work_cpu_mean_us']:6.2f}x; less "
                      f"allocator mean {r['own_mean_us'] / mine['own_mean_us']:6.2f}x floor "
                      f"{r['own_floor_mean_us'] / mine['own_floor_mean_us']:6.2f}x cpu "
                      f"{r['own_cpu_mean_us'] / mine['own_cpu_mean_us']:6.2f}x / "
                      f"lifecycle mean {r['mean_us'] / mine['mean_us']:5.2f}x floor "
                      f"{r['floor_mean_us'] / mine['floor_mean_us']:5.2f}x  ({same})")
    return 0


def markdown(rows: List[Dict[str, Any]], a: Any, limits: Dict[str, int], timer_ns: float,
             timer_cpu_ns: float, loadavg: List[Any], argv: List[str]) -> str:
    """The run as markdown: the plugin table of ``bench/cache_bench.py`` and, per trace, the
    CPU µs per request of each cache call."""
    import datetime as dt
    import subprocess

    from cache_bench import _plugin_table

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=str(HERE)).stdout.strip()
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = [f"# Cache work through the SGLang plugin ({when})", "",
          f"`python bench/cache_bench_sglang.py {' '.join(argv)}` at commit {commit}; "
          f"{a.max_running} in flight; systems in turn, {a.repeats} rounds after one untimed "
          f"pass each; requests per trace: all"
          + (f" except {', '.join(f'{k} first {v}' for k, v in limits.items())}"
             if limits else "") + ". Load average (1/5/15 min) at start "
          f"{tuple(round(x, 1) for x in loadavg[0])}, at end "
          f"{tuple(round(x, 1) for x in loadavg[-1])} on {os.cpu_count()} cores. Timer cost "
          f"per outer call, in every number alike and not subtracted: {timer_ns:.0f} ns wall, "
          f"{timer_cpu_ns:.0f} ns CPU.", "",
          "Cache work: time inside the cache object's methods (SGLang's `BasePrefixCache` "
          "surface; one wrapper on every cache, outermost calls only, `bench/_call_timer.py`), "
          "per request: mean (median over rounds), floor (each request's least time over the "
          "rounds, averaged), CPU (the thread's CPU time in the same spans). 'Less SGLang's "
          "allocator': the same less the allocator calls the cache made (frees of duplicates, "
          "evictions, released rows; SGLang's CPU `TokenToKVPoolAllocator` copies its whole "
          "free list on every free). Whole lifecycle: admission + finish spans, SGLang's `Req` "
          "and pool work included. URC: SGLang's UnifiedRadixCache on its Rust tree core.", "",
          _plugin_table({"rows": rows}), "",
          "Less SGLang's allocator, CPU µs per request and ratio:", "",
          "| trace | events | plugin | URC | URC / plugin |", "|---|---|---:|---:|---:|"]
    by = {(r["trace"], r["system"]): r for r in rows}
    for t in dict.fromkeys(r["trace"] for r in rows):
        for label, mine, ref in (("off", "radixkv-plugin", "sglang-urc-rust"),
                                 ("on", "radixkv-plugin+events", "sglang-urc-rust+events")):
            p, u = by.get((t, mine)), by.get((t, ref))
            if p and u:
                md.append(f"| {t} | {label} | {p['own_cpu_mean_us']:.1f} | "
                          f"{u['own_cpu_mean_us']:.1f} | "
                          f"{u['own_cpu_mean_us'] / p['own_cpu_mean_us']:.1f}x |")
    md += ["", "Allocator calls the cache made in a round (median), and the plugin's parked "
           "duplicate frees: tokens still parked when the round ends, the hand-over of them "
           "then (timed apart, CPU µs), and cache work CPU µs per request with that hand-over "
           "spread over the requests; URC / plugin with it:", "",
           "| trace | events | plugin allocator calls | URC allocator calls | parked at end | "
           "end hand-over CPU µs | plugin CPU with it | URC / plugin CPU with it |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for t in dict.fromkeys(r["trace"] for r in rows):
        for label, mine, ref in (("off", "radixkv-plugin", "sglang-urc-rust"),
                                 ("on", "radixkv-plugin+events", "sglang-urc-rust+events")):
            p, u = by.get((t, mine)), by.get((t, ref))
            if p and u:
                md.append(f"| {t} | {label} | {p['alloc_calls']:.0f} | {u['alloc_calls']:.0f} | "
                          f"{p['parked_end_tokens']:.0f} | {p['handover_end_cpu_us']:.0f} | "
                          f"{p['work_handover_cpu_mean_us']:.1f} | "
                          f"{u['work_cpu_mean_us'] / p['work_handover_cpu_mean_us']:.1f}x |")
    md += ["", "CPU µs per request by call (allocator included), the round with the median "
           "cache-work mean:", ""]
    for t in dict.fromkeys(r["trace"] for r in rows):
        sys_rows = [r for r in rows if r["trace"] == t]
        calls = sorted({k for r in sys_rows for k in r["work_cpu_by_call_us"]})
        md += [f"**{t}**", "", "| call | " + " | ".join(r["system"] for r in sys_rows) + " |",
               "|---|" + "---:|" * len(sys_rows)]
        md += [f"| {c} | " + " | ".join(f"{r['work_cpu_by_call_us'].get(c, 0):.1f}"
                                         for r in sys_rows) + " |" for c in calls]
        md.append("")
    return "\n".join(md) + "\n"


def median_row(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Median of each number over the runs; the per-call breakdown from the run with the
    median cache-work mean; every run's two means kept."""
    mid = sorted(runs, key=lambda r: r["work_mean_us"])[len(runs) // 2]
    med = {k: statistics.median(r[k] for r in runs) if isinstance(v, (int, float)) else mid[k]
           for k, v in runs[0].items() if not k.startswith("_")}
    # floor: each request's least time over the runs (what is left once other processes'
    # preemptions are filtered out), then the mean over requests
    for key, src in (("floor_mean_us", "_per_ns"), ("work_floor_mean_us", "_work_ns"),
                     ("own_floor_mean_us", "_own_ns")):
        med[key] = statistics.fmean(min(x) for x in zip(*(r[src] for r in runs))) / 1e3
    med["work_mean_us_runs"] = [r["work_mean_us"] for r in runs]
    med["mean_us_runs"] = [r["mean_us"] for r in runs]
    return med


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
