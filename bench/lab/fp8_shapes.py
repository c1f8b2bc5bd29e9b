"""Which tile shape the direct FP8 decode (NVIDIA narrow form) wants: a lab probe, not a product
switch. `--patch SRC DST VARIANT` writes a copy of hip/ whose FP8 narrow shapes (ShapesOf in
paged_decode_mma.cuh) are replaced; `--time TAG` times FP8 and bf16 decode of this build on a few
cells (bench/kernels_fp8.py's timing, FlashInfer off) and prints one line per cell.

Variants: "w8" (8 warps, 3 stages: the bytes in flight of today's 4 warps x 6 stages, twice the
warps), "k2" (twice the keys per tile, 3 stages: the same bytes, half the tiles).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

OLD = ("  using dflt = Shape<D, DefaultShape<D>::W, DefaultShape<D>::KEYS, 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
       "  using wide = Shape<D, WideShape<D>::W, WideShape<D>::KEYS, 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n")
NEW = {
    "w8": ("  using dflt = Shape<D, kNarrow ? 8 : DefaultShape<D>::W, DefaultShape<D>::KEYS, kNarrow ? 3 : 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
           "  using wide = Shape<D, kNarrow ? 8 : WideShape<D>::W, WideShape<D>::KEYS, kNarrow ? 3 : 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n"),
    "k2": ("  using dflt = Shape<D, DefaultShape<D>::W, (kNarrow && DefaultShape<D>::KEYS < 64) ? 2 * DefaultShape<D>::KEYS : DefaultShape<D>::KEYS, kNarrow ? 3 : 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;\n"
           "  using wide = Shape<D, WideShape<D>::W, (kNarrow && WideShape<D>::KEYS < 64) ? 2 * WideShape<D>::KEYS : WideShape<D>::KEYS, kNarrow ? 3 : 2 * WideShape<D>::S - kMinus, 1, kNarrow>;\n"),
}


def patch(src: Path, dst: Path, variant: str) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    f = dst / "paged_decode_mma.cuh"
    text = f.read_text()
    if text.count(OLD) != 1:
        sys.exit("fp8_shapes --patch: ShapesOf's FP8 lines moved")
    f.write_text(text.replace(OLD, NEW[variant]))
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
