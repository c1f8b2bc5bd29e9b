// hip/extend_attention.cu -- extend attention's entry point and its 16-bit-cache kernels (the
// kernel itself: extend_attention_kernel.cuh). FP8 caches go to their own units
// (extend_fp8_e4m3.cu, extend_fp8_e5m2.cu), so the three compile in parallel.
#include "extend_attention_kernel.cuh"

namespace rk {

void launch_extend_attention(const ExtendParams& p, Stream stream) {
  switch (p.kv_type) {
    case KVType::kSame:
      RK_DISPATCH_HEAD_DIM(p.head_dim, kD, [&] {
        RK_DISPATCH_DTYPE(p.dtype, T, [&] { extend_detail::launch<T, T, kD>(p, stream); });
      });
      return;
    case KVType::kFp8E4M3:
      return launch_extend_attention_e4m3(p, stream);
    case KVType::kFp8E5M2:
      return launch_extend_attention_e5m2(p, stream);
  }
  throw_unsupported("KV cache dtype code", static_cast<int>(p.kv_type), "0, 1, 2");
}

int extend_tile_rows(int head_dim) {
  int rows = 0;
  RK_DISPATCH_HEAD_DIM(head_dim, kD, [&] { rows = extend_detail::Cfg<kD>::kBM; });
  return rows;
}

}  // namespace rk
