// copy_blocks.cu — copy whole pages (copy-on-write), vectorised.
//
// Grid (pair, cache, slice): each block copies one slice of one page of the K or V cache with
// 16-byte loads, kUnroll of them in flight per thread before the stores, where vLLM's kernel moves
// one element per thread and iteration.
#include "copy_blocks.h"
#include "guard.h"
#include "platform.h"

#include <type_traits>

namespace rk {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <typename W>  // W: vec16 (16-byte path) or uint16_t (fallback)
__global__ void __launch_bounds__(kThreads) copy_blocks_kernel(const CopyBlocksParams p) {
  const int pair = blockIdx.x;
  const int32_t src = p.pairs[2 * pair], dst = p.pairs[2 * pair + 1];
  if (src < 0 || dst < 0 || src >= p.num_pages || dst >= p.num_pages) {
    if (threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
      guard::report(p.status, guard::kCopyBlocks, guard::kPageRange);
    return;
  }
  char* base = static_cast<char*>(blockIdx.y == 0 ? p.k_cache : p.v_cache);
  const W* from = reinterpret_cast<const W*>(base + src * p.page_bytes);
  W* to = reinterpret_cast<W*>(base + dst * p.page_bytes);
  const int64_t n = p.page_bytes / static_cast<int64_t>(sizeof(W));
  const int64_t per_slice = static_cast<int64_t>(kThreads) * kUnroll;
  for (int64_t start = blockIdx.z * per_slice; start < n; start += gridDim.z * per_slice) {
    // uint4, not vec16, in registers: clang kept an array of vec16 (a struct copied as bytes) in
    // scratch on AMD (hip/isa_report.py).
    using R = typename std::conditional<sizeof(W) == 16, uint4, W>::type;
    R buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = start + u * kThreads + threadIdx.x;
      if (i < n) buf[u] = reinterpret_cast<const R*>(from)[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = start + u * kThreads + threadIdx.x;
      if (i < n) reinterpret_cast<R*>(to)[i] = buf[u];
    }
  }
}

}  // namespace

void launch_copy_blocks(const CopyBlocksParams& p, Stream stream) {
  if (p.num_pairs == 0 || p.page_bytes == 0) return;
  const bool vec = p.page_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p.k_cache) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.v_cache) % 16 == 0;
  const int64_t width = vec ? 16 : 2;
  const int64_t per_slice = static_cast<int64_t>(kThreads) * kUnroll * width;
  const int64_t slices = (p.page_bytes + per_slice - 1) / per_slice;
  const dim3 grid(p.num_pairs, 2, static_cast<unsigned>(slices < 64 ? slices : 64));
  const stream_t s = static_cast<stream_t>(stream);
  if (vec)
    copy_blocks_kernel<vec16><<<grid, kThreads, 0, s>>>(p);
  else
    copy_blocks_kernel<uint16_t><<<grid, kThreads, 0, s>>>(p);
  const error_t e = last_error();
  if (e != kSuccess) throw LaunchError(std::string("radixkv copy_blocks launch: ") + error_string(e));
}

}  // namespace rk
