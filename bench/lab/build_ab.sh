#!/usr/bin/env bash
# Alternates bench/lab/plugin_ab.py (current plugin package, no --old) between two builds of
# radixkv: OLD_PY (a python/ folder holding another build's radixkv package, e.g. a commit
# exported with `git archive` and built with `cargo build --release -p radixkv-py --features
# pyo3/extension-module`, its lib_core.so copied to radixkv/_core.abi3.so) and this checkout's
# python/. Rounds: old, new, old, new. Extra arguments go to plugin_ab.py.
#   OLD_PY=/tmp/base/python bash bench/lab/build_ab.sh --traces chat,fewshot,chat_evict --rounds 3
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv-anchors/bin/python}
for side in old new old new; do
    if [ "$side" = old ]; then pp=$OLD_PY; else pp=python; fi
    echo "== $side ($pp) $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=$pp "$PY" bench/lab/plugin_ab.py "$@" | grep -v '^load'
done
