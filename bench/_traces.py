"""Locate the benchmark kit and load its serving traces.

The traces and the anchor benchmark are not part of this repository: they come in
the benchmark kit (bench/README.md says what it holds), so that radixkv and the
anchors replay byte-identical requests. Nothing is copied from it:
``cache_traces.py`` is imported by path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
SHARED_ENV = "RADIXKV_SHARED"


def shared_dir(override: Optional[str] = None) -> Path:
    """The benchmark kit's folder: the ``--shared`` flag, else $RADIXKV_SHARED."""
    raw = override or os.environ.get(SHARED_ENV)
    if not raw:
        raise SystemExit(
            f"cache_bench: where is the benchmark kit? Pass --shared DIR or set {SHARED_ENV} "
            "to the folder holding bench/cache_traces.py (bench/README.md)"
        )
    path = Path(raw).resolve()
    if not (path / "bench" / "cache_traces.py").is_file():
        raise SystemExit(
            f"cache_bench: no bench/cache_traces.py under {path}; pass --shared DIR "
            f"or set {SHARED_ENV} to the benchmark kit's folder (bench/README.md)"
        )
    return path


def load_traces_module(shared: Path) -> ModuleType:
    """Import the kit's ``bench/cache_traces.py`` under its own name (the anchor does too)."""
    if "cache_traces" in sys.modules:
        return sys.modules["cache_traces"]
    path = shared / "bench" / "cache_traces.py"
    spec = importlib.util.spec_from_file_location("cache_traces", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    # dataclasses resolve annotations through sys.modules while the module executes
    sys.modules["cache_traces"] = mod
    spec.loader.exec_module(mod)
    return mod


def load_trace(shared: Path, name: str, trace_dir: Optional[str] = None) -> Any:
    """The trace ``name``: read from ``trace_dir/<name>.jsonl`` when given, else generated.

    Generation is seeded and identical to what the anchor replays in its own process.
    """
    mod = load_traces_module(shared)
    if trace_dir:
        path = Path(trace_dir) / f"{name}.jsonl"
        if not path.is_file():
            raise SystemExit(f"cache_bench: trace file {path} not found "
                             f"(write it with: python {shared}/bench/cache_traces.py {trace_dir})")
        return mod.read_trace(str(path))
    return mod.build_trace(name)


def trace_names(shared: Path) -> tuple[str, ...]:
    return tuple(load_traces_module(shared).TRACE_NAMES)


def load_anchor_module(shared: Path) -> ModuleType:
    """Import the kit's ``bench/cache_anchor_bench.py`` for its pure helpers (pool capacity).

    Its top level needs only the standard library; SGLang and vLLM are imported lazily
    inside its drivers, so this works from radixkv's own venv.
    """
    if "cache_anchor_bench" in sys.modules:
        return sys.modules["cache_anchor_bench"]
    load_traces_module(shared)
    path = shared / "bench" / "cache_anchor_bench.py"
    spec = importlib.util.spec_from_file_location("cache_anchor_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cache_anchor_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


def capacity_tokens(shared: Path, trace: Any, max_running: int) -> int:
    """KV pool size for a trace: the anchor's own rule, so both sides run the same pool."""
    return int(load_anchor_module(shared).capacity_for(trace, max_running))
