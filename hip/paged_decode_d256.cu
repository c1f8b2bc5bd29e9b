// paged_decode_d256.cu — paged decode kernels for head_dim 256 (one TU per head_dim so builds
// parallelise; compiled out with -DRADIXKV_HD_256=0).
#include "paged_decode_kernel.cuh"

namespace rk {

void launch_paged_decode_d256(const PagedDecodeParams& p, Stream stream) {
#if RADIXKV_HD_256
  RK_PAGED_DECODE_FOR_HEAD_DIM(256, p, stream);
#else
  (void)p;
  (void)stream;
  throw_unsupported("head_dim", 256, "not compiled in this build (RADIXKV_HEAD_DIMS)");
#endif
}

}  // namespace rk
