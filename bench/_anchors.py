"""Run SGLang's and vLLM's caches through the benchmark kit's ``bench/cache_anchor_bench.py``.

The anchors need their own interpreter (torch 2.14.1, sglang 0.5.23, vllm 0.33.0;
see ``bench/setup_anchors.sh``), so they run in a subprocess whose ``--json`` file is
read back and merged with radixkv's numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from _traces import REPO

ANCHORS_PYTHON_ENV = "RADIXKV_ANCHORS_PYTHON"
DEFAULT_SYSTEMS = ("sglang-urc-rust", "sglang-radix", "vllm")


def anchors_python(override: Optional[str] = None) -> Path:
    raw = (override or os.environ.get(ANCHORS_PYTHON_ENV)
           or str(REPO / ".venv-anchors" / "bin" / "python"))
    path = Path(raw)
    if not path.exists():
        raise SystemExit(
            f"cache_bench: anchors interpreter {path} not found; run bench/setup_anchors.sh, "
            f"pass --anchors-python, set {ANCHORS_PYTHON_ENV}, or use --no-anchors"
        )
    return path


def run_anchors(shared: Path, python: Path, systems: List[str], traces: List[str],
                repeats: int, max_running: int, mode: str = "bench",
                log: Callable[[str], None] = print) -> Dict[str, Any]:
    """One anchor process for all systems and traces; returns its JSON (info + results).

    ``mode`` is ``bench`` (timed replay), ``breakdown`` or ``memory``.
    """
    script = shared / "bench" / "cache_anchor_bench.py"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "anchors.json"
        cmd = [str(python), str(script), "--systems", ",".join(systems), "--traces",
               ",".join(traces), "--repeats", str(repeats), "--max-running", str(max_running),
               "--json", str(out)]
        if mode != "bench":
            cmd.append(f"--{mode}")
        log("anchors: " + " ".join(cmd[1:]))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=str(script.parent))
        assert proc.stdout is not None
        tail: List[str] = []
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-40:]
            log("  | " + line)
        if proc.wait() != 0 or not out.exists():
            sys.stderr.write("\n".join(tail) + "\n")
            raise SystemExit(f"cache_bench: anchor benchmark failed (exit {proc.returncode})")
        data: Dict[str, Any] = json.loads(out.read_text())
    data["command"] = " ".join(["python", "cache_anchor_bench.py"] + cmd[2:-2])
    return data


def load_anchor_json(path: str) -> Dict[str, Any]:
    """Reuse a saved anchor run (``--anchor-json``) instead of re-measuring."""
    data: Dict[str, Any] = json.loads(Path(path).read_text())
    if "results" not in data:
        raise SystemExit(f"cache_bench: {path} has no 'results'; expected the anchor's --json")
    return data
