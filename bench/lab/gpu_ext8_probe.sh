#!/usr/bin/env bash
# bench/lab/gpu_ext8_probe.sh -- where the FP8 warp-specialised extend spends its time: a narrow
# build (D=128, bf16, page 16, e4m3) and one of a patched copy whose producer skips the FP8
# conversion (wrong results; timing only); median times of both and of bf16 on one cell
# (bench/lab/fp8_ext_ncu.py); ncu source counters (SASS CSV) of the FP8 and bf16 kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
gpu_begin ext8_probe /tmp/out
export RADIXKV_HEAD_DIMS=128 RADIXKV_DTYPES=bf16 RADIXKV_PAGE_SIZES=16 RADIXKV_KV_DTYPES=e4m3
rm -rf /tmp/hip_noconv && cp -r hip /tmp/hip_noconv
python3 - <<'PY'
import sys; sys.path.insert(0, "bench/lab")
from pathlib import Path
from _patch import replace_once
replace_once(Path("/tmp/hip_noconv/extend_ws.cuh"), [("        convert(n % kRaw, s);\n", "")], "noconv")
PY
( RADIXKV_HIP_DIR=/tmp/hip_noconv RADIXKV_BUILD_DIR=/tmp/rkb_noconv MAX_JOBS=6 \
    python3 -c "from radixkv.ops import loader; loader.load(); print('noconv ok')" ) > "$OUT/build_noconv.txt" 2>&1 &
bpid=$!
export RADIXKV_BUILD_DIR=/tmp/rkb MAX_JOBS=10
build_kernels "$OUT/build.txt" 300 || exit 1
wait $bpid; stamp "noconv build: $(tail -1 "$OUT/build_noconv.txt")"
for kv in bf16 e4m3; do python3 bench/lab/fp8_ext_ncu.py --kv $kv --calls 20; done
RADIXKV_HIP_DIR=/tmp/hip_noconv RADIXKV_BUILD_DIR=/tmp/rkb_noconv python3 bench/lab/fp8_ext_ncu.py --kv e4m3 --calls 20
if [[ -n "$NCU_BIN" ]]; then
  for kv in bf16 e4m3; do
    timeout 120 "$NCU_BIN" --clock-control none --kernel-name regex:extend_ws --launch-skip 1 \
      --launch-count 1 --set full --import-source yes -o /tmp/ncu_$kv -f \
      python3 bench/lab/fp8_ext_ncu.py --kv $kv --calls 2 > /tmp/ncu_run_$kv.txt 2>&1
    "$NCU_BIN" --import /tmp/ncu_$kv.ncu-rep --page source --csv --print-source sass > /tmp/sass_$kv.csv 2>&1
    "$NCU_BIN" --import /tmp/ncu_$kv.ncu-rep --page details --section WarpStateStats --section SpeedOfLight \
      --section SchedulerStats > "$OUT/ncu_$kv.txt" 2>&1
    stamp "ncu $kv: $(grep -E "Duration" "$OUT/ncu_$kv.txt" | head -1)"
  done
  tar czf "$OUT/sass.tgz" -C /tmp sass_bf16.csv sass_e4m3.csv
fi
stamp done
