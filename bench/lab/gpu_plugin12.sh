#!/usr/bin/env bash
# Session 12, H200: the SGLang plugin's tests on the device's Python 3.12 / torch 2.11, with
# SGLang's pools on CUDA (test_side_by_side_on_seeded_traces_and_cuda_pools) and everything
# else of tests/test_sglang_plugin*.py on the CPU. Carry: .whl/sg (SGLang 0.5.23 for cp312 as a
# zip without its server extensions, plus the packages its cache modules import, and
# shared/bench/cache_traces.py of the benchmark kit) and .carry/_core.abi3.so (this checkout's build).
set -uo pipefail
source bench/lab/sglang_h200_site.sh
python3 -c "import torch, sglang, radixkv; print(torch.__version__, torch.cuda.get_device_name(), sglang.__version__, radixkv.__version__)"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_sglang_plugin.py -k "cuda_pools" 2>&1 | tee $OUT/cuda.log
python3 -m pytest -q -p no:cacheprovider tests/test_sglang_plugin.py tests/test_sglang_plugin_frees.py 2>&1 | tail -5 | tee $OUT/all.log
# cache work per request with SGLang's pools on the GPU (as a server keeps them) and on the CPU,
# against SGLang's Python RadixCache (its Rust-cored URC needs torch 2.14); the kit's
# cache_traces.py travels in .whl/sg/shared
for dev in cuda cpu; do
    python3 bench/cache_bench_sglang.py --shared .whl/sg/shared --traces chat,chat_evict \
        --systems radixkv-plugin,sglang-radix --repeats 2 --device $dev 2>&1 \
        | grep -E "cache work mean|^  " | tee $OUT/bench_$dev.log
done
