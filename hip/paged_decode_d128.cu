// paged_decode_d128.cu — paged decode kernels for head_dim 128 (one TU per head_dim so builds
// parallelise; compiled out with -DRADIXKV_HD_128=0).
#include "paged_decode_kernel.cuh"

namespace rk {

void launch_paged_decode_d128(const PagedDecodeParams& p, Stream stream) {
#if RADIXKV_HD_128
  RK_PAGED_DECODE_FOR_HEAD_DIM(128, p, stream);
#else
  (void)p;
  (void)stream;
  throw_unsupported("head_dim", 128, "not compiled in this build (RADIXKV_HEAD_DIMS)");
#endif
}

}  // namespace rk
