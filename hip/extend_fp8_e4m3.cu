// hip/extend_fp8_e4m3.cu -- extend attention's kernels for float8_e4m3 caches (one unit per FP8
// type so builds parallelise; compiled out with -DRADIXKV_KV_E4M3=0).
#include "extend_attention_kernel.cuh"

namespace rk {

void launch_extend_attention_e4m3(const ExtendParams& p, Stream stream) {
#if RADIXKV_KV_E4M3
  RK_DISPATCH_HEAD_DIM(p.head_dim, kD, [&] {
    RK_DISPATCH_DTYPE(p.dtype, T, [&] { extend_detail::launch<T, fp8e4m3_t, kD>(p, stream); });
  });
#else
  (void)stream;
  throw_unsupported("KV cache dtype code", static_cast<int>(p.kv_type),
                    "not compiled in this build (RADIXKV_KV_DTYPES)");
#endif
}

}  // namespace rk
