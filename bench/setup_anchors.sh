#!/usr/bin/env bash
# Build the anchors' venv (SGLang 0.5.23 and vLLM 0.33.0 caches) exactly as the
# benchmark kit's bench/README.md prescribes (bench/README.md here says what the
# kit is). Their packages pull in far more than
# their caches use, so they go in with --no-deps plus a pinned list of what
# the import chain needs. Kept apart from .venv: the anchors pin torch 2.14.1.
#
# usage: bench/setup_anchors.sh [VENV_DIR]   (default: .venv-anchors at the repo root)
# env:   RADIXKV_SHARED  the benchmark kit's folder (required)
#        PYTHON          interpreter to build the venv from (default: python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="${RADIXKV_SHARED:?set RADIXKV_SHARED to the folder of the benchmark kit (bench/README.md)}"
venv="${1:-$repo/.venv-anchors}"
reqs="$shared/bench/anchor-requirements.txt"

if [[ ! -f "$reqs" ]]; then
  echo "setup_anchors: $reqs not found; set RADIXKV_SHARED to the benchmark kit's folder" >&2
  exit 2
fi

"${PYTHON:-python3}" -m venv "$venv"
pip="$venv/bin/pip"
# sglang 0.5.23 pins torch 2.14.1; its Rust core loads on torch 2.11-2.14 only.
"$pip" install torch==2.14.1
"$pip" install --no-deps sglang==0.5.23 vllm==0.33.0
"$pip" install --no-deps -r "$reqs"
# Smoke test: the three cache systems the benchmark replays must import.
"$venv/bin/python" - <<'PY'
import sglang, vllm, torch
print("anchors ready: torch", torch.__version__, "sglang", sglang.__version__, "vllm", vllm.__version__)
PY
