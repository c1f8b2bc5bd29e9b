// store_kv.cu — write new tokens' K/V rows into their slots, 16 bytes per thread per access.
//
// Thread i handles chunk i % (D/8) of row i / (D/8), rows ordered (token, head), so neighbouring
// threads write neighbouring bytes of one row: copied for 16-bit caches, quantised for FP8.
#include "dispatch.h"
#include "guard.h"
#include "platform.h"
#include "store_kv.h"

namespace rk {
namespace {

constexpr int kThreads = 256;

// The walk both kernels share: put(n, h, c, dst) for chunk c (8 elements) of head h of token n,
// whose slot is in the pool, dst its element offset in the cache. A negative slot is padding,
// skipped by design; one past the pool is a fault (one report per token).
template <class Put>
RK_DEVICE void for_each_chunk(const StoreKVParams& p, Put&& put) {
  const int chunks = p.head_dim / 8;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * p.num_heads * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int c = static_cast<int>(i % chunks);
    const int64_t row = i / chunks;
    const int h = static_cast<int>(row % p.num_heads);
    const int n = static_cast<int>(row / p.num_heads);
    const int64_t slot = p.slots[n];
    if (slot < 0 || slot >= p.num_pages * p.page_size) {
      if (slot >= 0 && h == 0 && c == 0) guard::report(p.status, guard::kStoreKV, guard::kSlotRange);
      continue;
    }
    const int64_t dst = (slot / p.page_size) * p.cache_stride_page +
                        (slot % p.page_size) * p.cache_stride_slot + h * p.cache_stride_head + 8 * c;
    put(static_cast<int64_t>(n), h, c, dst);
  }
}

// 16-bit caches: a 16-byte copy per chunk (the element type does not matter).
__global__ void __launch_bounds__(kThreads) store_kv_kernel(const StoreKVParams p) {
  for_each_chunk(p, [&](int64_t n, int h, int c, int64_t dst) {
    const uint16_t* k = static_cast<const uint16_t*>(p.k) + n * p.k_stride_n + h * p.k_stride_h + 8 * c;
    const uint16_t* v = static_cast<const uint16_t*>(p.v) + n * p.v_stride_n + h * p.v_stride_h + 8 * c;
    store16(static_cast<uint16_t*>(p.k_cache) + dst, load16(k));
    store16(static_cast<uint16_t*>(p.v_cache) + dst, load16(v));
  });
}

// FP8 caches: each chunk quantised (16 bytes in, 8 bytes out). The scales are read on the
// device, so the op stays graph-safe; a non-finite or non-positive scale stores NaN codes
// (fp8_checked_scale) rather than plausible values, and is recorded (guard.h kStoreKScale /
// kStoreVScale) by the threads that read it, once each, where they leave.
template <typename T, typename KV>
__global__ void __launch_bounds__(kThreads) store_kv_fp8_kernel(const StoreKVParams p) {
  uint32_t bad = 0;
  for_each_chunk(p, [&](int64_t n, int h, int c, int64_t dst) {
    const float ks_raw = p.scales.k[h * p.scales.stride], vs_raw = p.scales.v[h * p.scales.stride];
    bad |= guard::scale_fault(ks_raw, guard::kStoreKScale) | guard::scale_fault(vs_raw, guard::kStoreVScale);
    const float ks = fp8_checked_scale(ks_raw);
    const float vs = fp8_checked_scale(vs_raw);
    const T* k = static_cast<const T*>(p.k) + n * p.k_stride_n + h * p.k_stride_h + 8 * c;
    const T* v = static_cast<const T*>(p.v) + n * p.v_stride_n + h * p.v_stride_h + 8 * c;
    float kf[8], vf[8];
    unpack8<T>(load16(k), kf);
    unpack8<T>(load16(v), vf);
    uint32_t kw[2] = {0u, 0u}, vw[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      kw[e / 4] |= uint32_t(float_to_fp8<KV>(div_rn(kf[e], ks))) << (8 * (e % 4));
      vw[e / 4] |= uint32_t(float_to_fp8<KV>(div_rn(vf[e], vs))) << (8 * (e % 4));
    }
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.k_cache) + dst) = make_uint2(kw[0], kw[1]);
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.v_cache) + dst) = make_uint2(vw[0], vw[1]);
  });
  guard::report_extra(p.status, bad);
}

}  // namespace

void launch_store_kv(const StoreKVParams& p, Stream stream) {
  if (p.num_tokens == 0 || p.num_heads == 0) return;
  if (p.head_dim % 8 != 0) throw_unsupported("head_dim (store_kv)", p.head_dim, "multiples of 8");
  const int64_t total = static_cast<int64_t>(p.num_tokens) * p.num_heads * (p.head_dim / 8);
  const int64_t want = (total + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 65536 ? want : 65536);
  if (p.kv_type != KVType::kSame) {
    RK_DISPATCH_DTYPE(p.dtype, T, [&] {
      RK_DISPATCH_KV(p.kv_type, T, KV, [&] {
        if constexpr (IsFp8<KV>::value)
          store_kv_fp8_kernel<T, KV><<<blocks, kThreads, 0, static_cast<stream_t>(stream)>>>(p);
      });
    });
  } else {
    store_kv_kernel<<<blocks, kThreads, 0, static_cast<stream_t>(stream)>>>(p);
  }
  const error_t e = last_error();
  if (e != kSuccess) throw LaunchError(std::string("radixkv store_kv launch: ") + error_string(e));
}

}  // namespace rk
