#!/usr/bin/env bash
# Session 13, H200: host cost of the plugin's id copies (bench/lab/copy_costs.py), then cache
# work per request on SGLang's CUDA and CPU pools with the per-call breakdown. Carry as
# gpu_plugin12.sh (.whl/sg with shared/bench/cache_traces.py, .carry/_core.abi3.so).
set -uo pipefail
python3 bench/lab/copy_costs.py | tee $OUT/copy_costs.log
source bench/lab/sglang_h200_site.sh
python3 -m pytest -q -p no:cacheprovider tests/test_sglang_plugin.py -k "cuda_pools" 2>&1 | tail -2
for dev in cuda cpu; do
    python3 bench/cache_bench_sglang.py --shared .whl/sg/shared --traces chat,chat_evict \
        --systems radixkv-plugin,sglang-radix --repeats 3 --device $dev --md $OUT/calls_$dev.md \
        2>&1 | grep -E "cache work mean|^  " | tee $OUT/bench_$dev.log | grep -E "^  "
done
