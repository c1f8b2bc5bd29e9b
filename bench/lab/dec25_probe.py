"""Insert per-block stamps into a copy of hip/'s matrix-unit decode kernel (a lab probe, session 25).

    python3 bench/lab/dec25_probe.py HIPDIR

edits HIPDIR/paged_decode_mma.cuh and HIPDIR/paged_decode_d128.cu in place. Thread 0 of each block
(linear index blockIdx.y * gridDim.x + blockIdx.x < 1024) writes 32 words to g_probe: clock64 at
0 entry, 1 plan row and request metadata in hand, 2 warp 0's first tile landed, 3 every warp's loop
done, 4 partial stored (after the barrier before the ticket), 5 merge ticket known, 6 merge done
(the last block) or = 5, 7 the last block's (m, l) loads landed, 15 its weights computed; 8 / 9
globaltimer at entry / exit; 10 SM id; 11 unit; 12 blockIdx.x; 13 last block of its group; 14 the
unit count of its request; 16 + w: warp w's loop done (its lane 0). bench/lab/dec25_stamps.py reads them.
"""
from __future__ import annotations

import sys
from pathlib import Path

EDITS = [
    ("  if (unit >= p.plan_capacity) return;\n",
     "  if (unit >= p.plan_capacity) return;\n  RKP(0, clock64()); RKP(8, global_timer_ns()); RKP(10, sm_id()); RKP(11, unit); RKP(12, blockIdx.x);\n"),
    ("  if (!unit_and_pages<PS>(p, unit, job, rq, faults)) return;  // an unused row\n",
     "  if (!unit_and_pages<PS>(p, unit, job, rq, faults)) return;  // an unused row\n  RKP(1, clock64()); RKP(14, job.count);\n"),
    ("    warp_sync();             // ... and every lane's\n",
     "    warp_sync();             // ... and every lane's\n    if (i == 0) RKP(2, clock64());\n"),
    ("  const bool merged = __syncthreads_and(rows_agree) != 0 && units > 1;\n",
     "  const bool merged = __syncthreads_and(rows_agree) != 0 && units > 1;\n  RKP(3, clock64());\n"),
    ("  if (!merged) return;\n",
     "  if (!merged) { RKP(6, clock64()); RKP(9, global_timer_ns()); return; }\n"),
    ("  if (tid == 0) s_last = ", "  RKP(4, clock64());\n  if (tid == 0) s_last = "),
    ("  if (!s_last) return;\n",
     "  RKP(5, clock64()); RKP(13, s_last);\n  if (!s_last) { RKP(6, clock64()); RKP(9, global_timer_ns()); return; }\n"),
    (["  __syncthreads();\n  if (tid < rows) {\n    float M = kNegInf;",
      "  __syncthreads();\n  for (int idx = tid; idx < NS * rows;"],
     lambda a: a.replace("  __syncthreads();\n", "  __syncthreads();\n  RKP(7, clock64());\n", 1)),
    (["    cL[tid] = finalize_scale(L);\n  }\n  __syncthreads();\n",
      "  }\n  __syncthreads();\n  for (int idx = tid; idx < rows * D4;"],
     lambda a: a.replace("  __syncthreads();\n", "  __syncthreads();\n  RKP(15, clock64());\n", 1)),
    ("  cp_async_wait<0>();\n  if (bad_page)",
     "  cp_async_wait<0>();\n  if (lane == 0) RKP_W(16 + warp, clock64());\n  if (bad_page)"),
    ("  if (tid == 0) *counter = 0;  // ready for the next launch (stream order)\n",
     "  if (tid == 0) *counter = 0;  // ready for the next launch (stream order)\n  RKP(6, clock64()); RKP(9, global_timer_ns());\n"),
    ("namespace decode_mma {\n",
     "namespace decode_mma {\n"
     "static __device__ unsigned long long g_probe[1024 * 32];\n"
     "#define RKP_W(k, v) do { const unsigned pb_ = blockIdx.y * gridDim.x + blockIdx.x; "
     "if (pb_ < 1024) g_probe[pb_ * 32 + (k)] = (unsigned long long)(v); } while (0)\n"
     "#define RKP(k, v) do { if (threadIdx.x == 0) RKP_W(k, v); } while (0)\n"),
]

TAIL = """
// PROBE (lab): the decode kernel's stamps.
extern "C" int rk_probe_read(void* dst, unsigned long bytes) {
  return int(cudaMemcpyFromSymbol(dst, rk::decode_mma::g_probe, bytes));
}
extern "C" int rk_probe_clear() {
  void* a = nullptr;
  if (cudaGetSymbolAddress(&a, rk::decode_mma::g_probe) != cudaSuccess) return -1;
  return int(cudaMemset(a, 0, sizeof(rk::decode_mma::g_probe)));
}
"""


def main() -> None:
    hip = Path(sys.argv[1])
    k = hip / "paged_decode_mma.cuh"
    s = k.read_text()
    for old, new in EDITS:
        olds = old if isinstance(old, list) else [old]
        hits = [o for o in olds if s.count(o) == 1]
        if not hits:
            sys.exit(f"anchor not found once: {olds!r}")
        o = hits[0]
        s = s.replace(o, new(o) if callable(new) else new)
    k.write_text(s)
    u = hip / "paged_decode_d128.cu"
    u.write_text(u.read_text() + TAIL)


if __name__ == "__main__":
    main()
