"""cProfile of one replay of a trace through the SGLang plugin (``cache_bench_sglang.replay``).

Prints the functions with the most own time (tottime) and the plugin's methods by cumulative
time, so the plugin's Python work per call can be told apart from the Rust calls and torch.

    PYTHONPATH=python .venv-anchors/bin/python bench/lab/plugin_profile.py --trace tree \
        --limit 1000 [--system radixkv-plugin+events] [--top 30] [--callees REGEX]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared")
    ap.add_argument("--trace", default="tree")
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--system", default="radixkv-plugin")
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--callees", default="",
                    help="regex of functions whose callees to print (e.g. 'cache.py.*checkpoint')")
    a = ap.parse_args()
    import _sglang_env

    _sglang_env.prepare()
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import _traces
    from cache_bench_sglang import replay

    shared = _traces.shared_dir(a.shared)
    trace = _traces.load_trace(shared, a.trace)
    cap = _traces.capacity_tokens(shared, trace, a.max_running)
    trace.requests = trace.requests[: a.limit]
    replay(a.system, trace, cap, a.max_running)  # untimed pass: SGLang's lazy imports
    prof = cProfile.Profile()
    prof.enable()
    row = replay(a.system, trace, cap, a.max_running)
    prof.disable()
    n = len(trace.requests)
    print(f"{a.trace} ({n} requests) {a.system}: cache work {row['work_mean_us']:.1f} us mean "
          f"(profiled, inflated)")
    for sort in ("tottime", "cumulative"):
        out = io.StringIO()
        st = pstats.Stats(prof, stream=out).strip_dirs().sort_stats(sort)
        st.print_stats(a.top)
        print(f"---- by {sort} ----")
        print("\n".join(out.getvalue().splitlines()[4:]))
    if a.callees:
        pstats.Stats(prof).strip_dirs().print_callees(a.callees)


if __name__ == "__main__":
    main()
