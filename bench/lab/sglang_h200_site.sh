# Sourced by the H200 plugin scripts (gpu_plugin12.sh, gpu_plugin13b.sh): SGLang 0.5.23 for
# cp312 and the packages its cache modules import, from the carried .whl/sg (a zip of SGLang
# without its server extensions, plus wheels), into /tmp/site; this checkout's carried build;
# inert placeholders (sglang_cuda_stub/sitecustomize.py) for the CUDA-only packages SGLang's
# cache modules import that the image lacks, found by importing until none is missing.
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/sg/*.whl || exit 1
python3 -m zipfile -e .whl/sg/sglang_slim.zip /tmp/site || exit 1
cp .carry/_core.abi3.so python/radixkv/_core.abi3.so
export PYTHONPATH=$PWD/python:/tmp/site:$PWD/bench/lab/sglang_cuda_stub PYTHONUNBUFFERED=1
export RADIXKV_PLACEHOLDERS=sgl_kernel
for i in $(seq 1 12); do
    miss=$(python3 -c "import radixkv.integrations.sglang.cache" 2>&1 \
        | sed -n "s/^ModuleNotFoundError: No module named '\([^'.]*\).*/\1/p" | tail -1)
    [ -z "$miss" ] && break
    echo "placeholder: $miss"; export RADIXKV_PLACEHOLDERS=$RADIXKV_PLACEHOLDERS,$miss
done
python3 -c "import radixkv.integrations.sglang.cache" || exit 1
