"""Which tile shape the direct FP8 decode (NVIDIA narrow form) wants: a lab probe, not a product
switch. `--patch SRC DST VARIANT` writes a copy of hip/ whose FP8 narrow shapes (ShapesOf in
paged_decode_mma.cuh) are replaced; `--time TAG` times FP8 and bf16 decode of this build on a few
cells (bench/kernels_fp8.py's timing, FlashInfer off) and prints one line per cell.

Variants, joined by "+": "w8" (8 warps, 3 stages: the bytes in flight of today's 4 warps x 6
stages, twice the warps), "k2" (twice the keys per tile, 3 stages: the same bytes, half the
tiles), "l2" (every 16-byte cp.async with the L2::256B prefetch hint instead of L2::128B: an FP8
head slice is 128 bytes, so the hint also fetches the neighbouring KV head's slice, which the
next block of the grid reads).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from _patch import fresh_copy, replace_once  # noqa: E402  (bench/lab, the script's own folder)

OLD = ("  using dflt = Shape<D, DefaultShape<D>::W, DefaultShape<D>::KEYS, 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
       "  using wide = Shape<D, WideShape<D>::W, WideShape<D>::KEYS, 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n")
NEW = {
    "w8": ("  using dflt = Shape<D, kNarrow ? 8 : DefaultShape<D>::W, DefaultShape<D>::KEYS, kNarrow ? 3 : 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
           "  using wide = Shape<D, kNarrow ? 8 : WideShape<D>::W, WideShape<D>::KEYS, kNarrow ? 3 : 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n"),
    "k2": ("  using dflt = Shape<D, DefaultShape<D>::W, (kNarrow && DefaultShape<D>::KEYS < 64) ? 2 * DefaultShape<D>::KEYS : DefaultShape<D>::KEYS, kNarrow ? 3 : 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
           "  using wide = Shape<D, WideShape<D>::W, (kNarrow && WideShape<D>::KEYS < 64) ? 2 * WideShape<D>::KEYS : WideShape<D>::KEYS, kNarrow ? 3 : 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n"),
}


L2_OLD = 'asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\\n"'
L2_NEW = 'asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\\n"'


def patch(src: Path, dst: Path, variant: str) -> None:
    fresh_copy(src, dst)
    for v in variant.split("+"):
        if v == "l2":
            replace_once(dst / "platform.h", [(L2_OLD, L2_NEW)], "fp8_shapes")
        else:
            replace_once(dst / "paged_decode_mma.cuh", [(OLD, NEW[v])], "fp8_shapes")
    print(f"{variant} copy of {src} in {dst}")


def time_build(tag: str) -> None:
    import kernels_fp8 as kf  # noqa: PLC0415
    from _gpu_timing import Timer  # noqa: PLC0415
    from radixkv.ops import loader  # noqa: PLC0415

    loader.load()
    kf.load_flashinfer = lambda tag: None  # radixkv only
    timer = Timer()
    read = kf.read_stream_tbps(timer)
    for r in kf.run_fp8_decode(timer, read, page_sizes=(16,), batches=(1, 64, 256), lengths=(4096, 32768)):
        print(f"[{tag}] B={r['batch']} L={r['kv_len']}: fp8 {r['fp8_us']:.1f} us ({r['frac_read']:.3f} read), "
              f"bf16 {r['bf16_us']:.1f} us, x{r['speedup_vs_bf16']:.2f}, err {r['rel_err_vs_bf16']:.1e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--patch", nargs=3, metavar=("SRC", "DST", "VARIANT"))
    ap.add_argument("--time", metavar="TAG")
    a = ap.parse_args()
    if a.patch:
        patch(Path(a.patch[0]), Path(a.patch[1]), a.patch[2])
    elif a.time:
        time_build(a.time)
    else:
        ap.error("--patch or --time")


if __name__ == "__main__":
    main()
