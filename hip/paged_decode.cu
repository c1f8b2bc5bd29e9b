// paged_decode.cu — launch_paged_decode: route by head_dim to the per-head-dim units.
#include "paged_decode.h"

namespace rk {

void launch_paged_decode(const PagedDecodeParams& p, Stream stream) {
  if (p.batch == 0 || p.num_q_heads == 0) return;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0)
    throw_unsupported("H_q / H_kv (must divide) with H_q", p.num_q_heads, "a multiple of H_kv");
  if (p.plan_capacity < 1) throw_unsupported("plan capacity", p.plan_capacity, ">= 1");
  switch (p.head_dim) {
    case 64: return launch_paged_decode_d64(p, stream);
    case 128: return launch_paged_decode_d128(p, stream);
    case 256: return launch_paged_decode_d256(p, stream);
    default: throw_unsupported("head_dim", p.head_dim, "64, 128, 256");
  }
}

}  // namespace rk
