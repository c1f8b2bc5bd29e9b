"""bench/kernels_fp8.py with the decode plan sized for `--per-sm` blocks per SM instead of the
product's count (radixkv.ops.decode_slots): the A/B behind a change of that count. Every other
argument goes to kernels_fp8.

    python3 bench/lab/slots_ab.py --per-sm 2 --no-extend --batches 1,16
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-sm", type=int, required=True)
    a, rest = ap.parse_known_args()
    import radixkv.ops as ops  # noqa: PLC0415
    from radixkv.ops import _api  # noqa: PLC0415

    orig = _api.decode_slots

    def slots(h_q, h_kv, device=None, kernel="auto", **kw):
        base = orig(h_q, h_kv, device, kernel, **kw)
        return base * a.per_sm if _api._matrix_kernel(
            device or __import__("torch").device("cuda"), kernel) else base

    _api.decode_slots = slots
    ops.decode_slots = slots
    print(f"[slots_ab] decode_slots x{a.per_sm}: {orig(32, 8)} -> {slots(32, 8)} for 32/8 heads")
    import kernels_fp8  # noqa: PLC0415

    sys.argv = [sys.argv[0], *rest]
    os.environ.setdefault("RADIXKV_OPS_BACKEND", "extension")
    kernels_fp8.main()


if __name__ == "__main__":
    main()
