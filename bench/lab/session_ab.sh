#!/usr/bin/env bash
# Like-for-like A/B of the whole stage (bench/cache_bench_sglang.py, the plugin and SGLang's
# URC with events off and on) between another build's python/ folder (OLD_PY: a commit
# exported and built apart, see bench/lab/old_core.md) and this checkout's: rounds of
# old / new in separate processes, each printing the ratios and the per-system lines.
#   OLD_PY=/tmp/base/python ROUNDS=2 bash bench/lab/session_ab.sh > log
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv-anchors/bin/python}
TRACES=${TRACES:-chat,fewshot,chat_evict}
SYSTEMS=${SYSTEMS:-radixkv-plugin,radixkv-plugin+events,sglang-urc-rust,sglang-urc-rust+events}
for r in $(seq 1 "${ROUNDS:-2}"); do
    for side in old new; do
        if [ "$side" = old ]; then pp=$OLD_PY; else pp=python; fi
        echo "=== round $r $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
        PYTHONPATH=$pp "$PY" bench/cache_bench_sglang.py --shared "${SHARED:-/work/shared}" \
            --traces "$TRACES" --repeats 3 \
            --systems "$SYSTEMS" 2>&1 | grep -E "^ratio|^  [a-z_]+ +sglang|cache work mean"
    done
done
echo "=== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
