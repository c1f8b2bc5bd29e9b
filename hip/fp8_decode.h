// fp8_decode.h — what the decode kernels add for FP8 KV caches (included by paged_decode_mma.cuh
// and paged_decode_kernel.cuh; device code, no torch).
//
// Matrix-unit kernel: the copy pipeline moves cache bytes unchanged (16-byte cp.async, as for
// 16-bit caches, so a stage of the same keys is half the bytes and the shapes carry more stages).
// Each lane lands its copies at stage_offset(j, lane), so it can read back its own 16 bytes
// without waiting for other lanes. Per tile, the warp converts the K stage into one 16-bit
// swizzled tile (the layout mma.h's ldmatrix / MFMA loads expect), runs S = Q K^T from it,
// converts the V stage into the same tile and runs O += P V: the products and softmax are the
// 16-bit kernel's, in fp16 (e4m3 and e5m2 values are exact in fp16; a bf16 q is converted to
// fp16 once, exact for |q| < 65504). Scales: the block's KV head has one K and one V scale, so
// the K scale joins the softmax scale and the V scale the output normalisation, both in fp32.
// CUDA-core kernel: 8-byte copies, and the 8 elements of a lane converted to floats.
#pragma once

#include <type_traits>

#include "mma.h"
#include "paged_decode.h"
#include "platform.h"

namespace rk {
namespace fp8 {

// The element type of the matrix products: q's type for 16-bit caches, fp16 for FP8 caches.
template <class T, class KV>
struct MathType {
  using type = T;
};
template <class T>
struct MathType<T, fp8e4m3_t> {
  using type = f16_t;
};
template <class T>
struct MathType<T, fp8e5m2_t> {
  using type = f16_t;
};

// Factors folded into the kernels' scales: the cache's scale for this KV head times what the
// fp8 -> fp16 bit placement leaves out (platform.h Fp8Unit); 1 for 16-bit caches.
// A scale that is not finite and positive makes NaN (fp8_scale_ok): the output is then NaN,
// never plausible numbers (the wrappers reject such scales when they can read them).
template <class KV>
RK_DEVICE float k_factor(const PagedDecodeParams& p, int kvh) {
  if constexpr (IsFp8<KV>::value) return fp8_checked_scale(p.scales.k[kvh * p.scales.stride]) * Fp8Unit<KV>::value;
  else return 1.f;
}
template <class KV>
RK_DEVICE float v_factor(const PagedDecodeParams& p, int kvh) {
  if constexpr (IsFp8<KV>::value) return fp8_checked_scale(p.scales.v[kvh * p.scales.stride]) * Fp8Unit<KV>::value;
  else return 1.f;
}

// Eight q elements of type T as the product type MT (bf16 -> fp16 for FP8 caches).
template <class T, class MT>
RK_DEVICE vec16 q_to_math(const vec16& v) {
  if constexpr (std::is_same<T, MT>::value) {
    return v;
  } else {
    float f[8];
    unpack8<T>(v, f);
    vec16 r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.w[i] = Convert<MT>::pack2(f[2 * i], f[2 * i + 1]);
    return r;
  }
}

// Byte offset of a lane's copy j inside a stage: copy-major, lanes side by side.
RK_DEVICE int stage_offset(int j, int lane) { return (j * kWarpSize + lane) * 16; }

// One stage of KEYS FP8 rows (copy j of this lane: row j * kRowsPerCopy + lane / kCopyChunks,
// elements 16 (lane % kCopyChunks) ...) into the warp's swizzled [KEYS][D] fp16 tile, then a
// warp barrier so every lane's rows are there for the products.
template <class KV, class C>
RK_DEVICE void convert_tile(uint16_t* tile, const uint8_t* stage, int lane) {
  const int r = lane / C::kCopyChunks, col = (lane % C::kCopyChunks) * 16;
#pragma unroll
  for (int j = 0; j < C::kCopies; ++j) {
    const vec16 raw = *reinterpret_cast<const vec16*>(stage + stage_offset(j, lane));
    vec16 lo, hi;
    fp8x16_to_f16x16<KV>(raw, lo, hi);
    const int row = j * C::kRowsPerCopy + r;
    store16(tile + mma::smem_index<C::D>(row, col), lo);
    store16(tile + mma::smem_index<C::D>(row, col + 8), hi);
  }
  warp_sync();
}
// The V stage into the same tile, once every lane has read K from it.
template <class KV, class C>
RK_DEVICE void convert_v(uint16_t* tile, const uint8_t* stage, int lane) {
  warp_sync();
  convert_tile<KV, C>(tile, stage, lane);
}

// CUDA-core kernel: 8 cache elements -> floats (FP8: times 1 / Fp8Unit, folded into the scales).
template <class T, class KV>
RK_DEVICE void unpack_row8(const vec16& v, float* out) {
  if constexpr (IsFp8<KV>::value) unpack8_fp8<KV>(v.w[0], v.w[1], out);
  else unpack8<T>(v, out);
}
// Copy one lane's 8 cache elements: 16 bytes for 16-bit caches, 8 for FP8.
template <class KV>
RK_DEVICE void copy_row8(void* smem, const KV* gmem, bool valid) {
  if constexpr (IsFp8<KV>::value) cp_async8(smem, gmem, valid);
  else cp_async16(smem, gmem, valid);
}

}  // namespace fp8
}  // namespace rk
