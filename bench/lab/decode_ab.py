"""Lab: FP8 (e4m3) and bf16 decode times of a few cells under the product's plan, for an A/B of
kernel libraries (run once per library, RADIXKV_PREBUILT_LIB pointing at it; same order of cells
in every run).

Usage (GPU machine, after bench/gpu_env.sh):
    RADIXKV_PREBUILT_LIB=.carry/var_v0.so python3 bench/lab/decode_ab.py --tag v0 --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _gpu_timing import Timer  # noqa: E402
from kernels_fp8 import Pools, radixkv_decode  # noqa: E402

CELLS = [(1, 256), (1, 512), (1, 4096), (1, 32768), (4, 512), (16, 512), (16, 4096), (16, 32768),
         (64, 4096), (256, 512)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    timer = Timer()
    pools = Pools(max(b * l for b, l in CELLS) + 64 * 16)
    scales = (pools.k_scale, pools.v_scale)
    rows = []
    for page in (1, 16):
        for batch, length in CELLS:
            c = pools.cell(batch, length, page, seed=batch * 100003 + length + page)
            reps = 30 if batch * length >= 1 << 19 else 60
            row = {"tag": args.tag, "page": page, "batch": batch, "kv_len": length}
            for name, fp8 in (("e4m3", True), ("bf16", False)):
                k, v = pools.view(page, fp8)
                row[f"{name}_us"] = timer(radixkv_decode(k, v, c, scales if fp8 else None), reps)
            rows.append(row)
            print(f"{args.tag} ps={page:>2} B={batch:>3} L={length:>5} e4m3 {row['e4m3_us']:8.1f} "
                  f"bf16 {row['bf16_us']:8.1f}", flush=True)
            del c
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"decode_ab_{args.tag}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
