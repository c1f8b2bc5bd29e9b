#!/usr/bin/env bash
# Session 13, H200 (session 12's script plus the no-wait test): the SGLang plugin's tests on the device's Python 3.12 / torch 2.11, with
# SGLang's pools on CUDA (test_side_by_side_on_seeded_traces_and_cuda_pools) and everything
# else of tests/test_sglang_plugin*.py on the CPU. Carry: .whl/sg (SGLang 0.5.23 for cp312 as a
# zip without its server extensions, plus the packages its cache modules import that the image
# lacks) and .carry/_core.abi3.so (this checkout's build).
set -uo pipefail
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/sg/*.whl || exit 1
python3 -m zipfile -e .whl/sg/sglang_slim.zip /tmp/site || exit 1
cp .carry/_core.abi3.so python/radixkv/_core.abi3.so
export PYTHONPATH=$PWD/python:/tmp/site:$PWD/bench/lab/sglang_cuda_stub PYTHONUNBUFFERED=1
# CUDA-only packages SGLang's cache modules import that the image lacks: served as inert
# placeholders (bench/lab/sglang_cuda_stub/sitecustomize.py), found by importing until none is missing
export RADIXKV_PLACEHOLDERS=sgl_kernel
for i in $(seq 1 12); do
    miss=$(python3 -c "import radixkv.integrations.sglang.cache" 2>&1 \
        | sed -n "s/^ModuleNotFoundError: No module named '\([^'.]*\).*/\1/p" | tail -1)
    [ -z "$miss" ] && break
    echo "placeholder: $miss"; export RADIXKV_PLACEHOLDERS=$RADIXKV_PLACEHOLDERS,$miss
done
python3 -c "import radixkv.integrations.sglang.cache" || exit 1
python3 -c "import torch, sglang, radixkv; print(torch.__version__, torch.cuda.get_device_name(), sglang.__version__, radixkv.__version__)"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_sglang_plugin.py -k "cuda_pools" 2>&1 | tail -30 | tee $OUT/cuda.log
python3 -m pytest -q -p no:cacheprovider tests/test_sglang_plugin.py tests/test_sglang_plugin_frees.py 2>&1 | tail -5 | tee $OUT/all.log
# cache work per request with SGLang's pools on the GPU (as a server keeps them) and on the CPU,
# against SGLang's Python RadixCache (its Rust-cored URC needs torch 2.14); the kit's
# cache_traces.py travels in .whl/sg/shared
for dev in cuda cpu; do
    python3 bench/cache_bench_sglang.py --shared .whl/sg/shared --traces chat,chat_evict \
        --systems radixkv-plugin,sglang-radix --repeats 3 --device $dev 2>&1 \
        | grep -E "cache work mean|^  " | tee $OUT/bench_$dev.log
done
