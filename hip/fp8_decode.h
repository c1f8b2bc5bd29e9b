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
// NVIDIA narrow form (GQA groups <= 8): no converted tile; each lane copies the bytes of its own
// MMA fragments and converts them in registers ("Direct fragments" below), which halves the
// shared-memory traffic per cache element.
// CUDA-core kernel: 8-byte copies, and the 8 elements of a lane converted to floats.
#pragma once

#include <type_traits>

#include "guard.h"
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
// A scale that is not finite and positive makes NaN (fp8_checked_scale): the output is then NaN,
// never plausible numbers, and `f` gains guard.h's kDecodeKScale / kDecodeVScale (the wrappers
// reject such scales when they can read them; device scales are read only here).
// kDirect: the fragment path below (its own conversion, direct_unit).
template <class KV>
RK_DEVICE float direct_unit();
template <class KV, bool kDirect = false>
RK_DEVICE float unit() {
  if constexpr (kDirect) return direct_unit<KV>();
  else return Fp8Unit<KV>::value;
}
// One KV head's scale from `scales` (p.scales.k or .v) as stored; 1 for 16-bit caches. A load a
// kernel can issue early, apart from the factor that uses it.
template <class KV>
RK_DEVICE float head_scale(const PagedDecodeParams& p, const float* scales, int kvh) {
  if constexpr (IsFp8<KV>::value) return scales[kvh * p.scales.stride];
  else return 1.f;
}
// A head's scale `s` times unit(); a bad one adds `bit` to f.
template <class KV, bool kDirect = false>
RK_DEVICE float scale_factor(float s, uint32_t bit, guard::Faults& f) {
  if constexpr (IsFp8<KV>::value) {
    f.extra |= guard::scale_fault(s, bit);
    return fp8_checked_scale(s) * unit<KV, kDirect>();
  } else {
    return 1.f;
  }
}
template <class KV, bool kDirect = false>
RK_DEVICE float k_factor(const PagedDecodeParams& p, int kvh, guard::Faults& f) {
  return scale_factor<KV, kDirect>(head_scale<KV>(p, p.scales.k, kvh), guard::kDecodeKScale, f);
}
template <class KV, bool kDirect = false>
RK_DEVICE float v_factor(const PagedDecodeParams& p, int kvh, guard::Faults& f) {
  return scale_factor<KV, kDirect>(head_scale<KV>(p, p.scales.v, kvh), guard::kDecodeVScale, f);
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

// ---------------------------------------------------------------------------------------------
// Direct fragments (NVIDIA, narrow form: S^T = K Q^T with K as the m16n8k16 A operand, O^T += V^T
// P^T with V^T as the A operand). Each lane's stage slots hold exactly the cache bytes it consumes
// as fragments; it reads them back with 16-byte loads (no converted tile) and converts them to
// fp16 fragments in registers. Lane = 4 g + t.
//  K: A[key][k] needs, per 16-dim block, rows (keys) g, g + 8 and k = 2t, 2t+1, 2t+8, 2t+9. The
//     dims are summed over, so they are permuted: block db's k positions of lane t are the four
//     contiguous cache dims t D/4 + 4 db + 0..3 (lo pair: k 2t, 2t+1; hi pair: 2t+8, 2t+9), so
//     the lane consumes bytes [t D/4, (t+1) D/4) of key rows g and g + 8. Q^T is built with the
//     same permutation (q_direct).
//  V: A[dim][key] needs keys 2t, 2t+1, 2t+8, 2t+9 of each 16-key block and, per 16-dim block db,
//     output rows g and g + 8. The output dims are permuted instead: those two rows are cache dims
//     g D/8 + 2 db + 0 / 1, so the lane consumes bytes [g D/8, (g+1) D/8) of those four key rows,
//     pairs bytes of key rows (2t, 2t+1) and (2t+8, 2t+9) with prmt, and O^T's row (db, g + 8 h)
//     is stored as dim out_dim(db, g, h). Keys keep their order, so P^T from the S^T accumulator
//     (mma.h pt_from_acc) matches.
// Conversion: cvt.rn.f16x2.e4m3x2 / e5m2x2 on sm_89+ (exact values); before that, platform.h's
// bit placement (e4m3 then reads as value x 2^-8: direct_unit says which).

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define RADIXKV_FP8_CVT 1
#endif

template <class KV>
RK_DEVICE float direct_unit() {
#if defined(RADIXKV_FP8_CVT)
  return 1.f;
#else
  return Fp8Unit<KV>::value;
#endif
}

// Four fp8 bytes of w -> fp16 pairs lo = (byte 0, byte 1), hi = (byte 2, byte 3), low element in
// the low half (value x 1 / direct_unit).
template <class KV>
RK_DEVICE void cvt4(uint32_t w, uint32_t& lo, uint32_t& hi) {
#if defined(RADIXKV_FP8_CVT)
  if constexpr (std::is_same<KV, fp8e4m3_t>::value) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
        " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
  } else {
    // e5m2 is the top byte of an fp16: two byte permutes with zeros.
    lo = __byte_perm(w, 0u, 0x1404);
    hi = __byte_perm(w, 0u, 0x3424);
  }
#else
  fp8x4_to_f16x4<KV>(w, lo, hi);
#endif
}

// Per-lane geometry of the direct stages for D dims and KEYS keys per tile.
// Copies: a lane's slots are filled by whichever lanes of its warp make each cp.async instruction
// read whole 128-byte cache lines (the lanes of a row copy its consecutive chunks), so every DRAM
// sector is requested once; the kernel's warp barrier after the wait makes the other lanes' copies
// visible. Slots: the bytes a lane consumes of one row are contiguous, and lanes are placed so that
// each 32-byte sector of a row lands in one aligned 32-byte block of shared memory (a sector split
// across blocks costs a second L2 request), the sectors of one line in different banks, and the
// V read-backs of a quarter-warp (half-warp for 8-byte reads) in different banks, except 2-way at
// D = 256. K read-backs conflict 2-way at D >= 128: a quarter-warp's 8 lanes read 16 bytes of
// their 32-byte sector blocks, and a per-lane chunk order cannot differ between the rows of one
// MMA fragment.
template <int D, int KEYS>
struct Direct {
  static constexpr int kKB = KEYS / 16;
  static constexpr int kKBytes = D / 4;               // per K row and lane
  static constexpr int kKChunks = kKBytes / 16;       // 16-byte copies per K row and lane
  static constexpr int kVBytes = D / 8;               // per V row and lane
  static constexpr int kVCopy = kVBytes < 16 ? kVBytes : 16;  // bytes per V copy (8 at D = 64)
  static constexpr int kVChunks = kVBytes / kVCopy;
  // One copy instruction: kKRows K rows (or kVRows V rows) of kKRowChunks (kVRowChunks) chunks.
  static constexpr int kKRowChunks = D / 16;
  static constexpr int kKRows = 32 / kKRowChunks;
  static constexpr int kVRowChunks = D / kVCopy;
  static constexpr int kVRows = 32 / kVRowChunks;
  // Slot groups of 32 lanes: K (kb, h) holds kKBytes per lane, V (kb, q) kVBytes per lane.
  static constexpr int kKSlots = kKB * 2;
  static constexpr int kVSlots = kKB * 4;
  static_assert(kKSlots * kKBytes * 32 == KEYS * D && kVSlots * kVBytes * 32 == KEYS * D, "stage bytes");
  static_assert(D % 64 == 0 && KEYS % 16 == 0, "direct shapes");
  // K: a lane's bytes of a row as 32-byte sector blocks; sector s of every lane in its own run of
  // 32 blocks, lanes XOR 2 s so the four sectors of a 128-byte line (D = 256) use different banks.
  static constexpr int kKSectors = kKBytes >= 32 ? kKBytes / 32 : 1;
  RK_HOST_DEVICE static constexpr int k_slot(int kb, int h, int c, int lane) {
    if constexpr (kKBytes < 32) return ((kb * 2 + h) * 32 + lane) * kKBytes;
    else return ((((kb * 2 + h) * kKSectors + (c >> 1)) * 32 + (lane ^ (2 * (c >> 1)))) * 32) + (c & 1) * 16;
  }
  // Position of lane 4 g + t in a V slot group, in units of kVBytes.
  RK_HOST_DEVICE static constexpr int v_pos(int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (kVBytes == 8) return ((g >> 2) << 4) | (((t ^ (g >> 2)) & 3) << 2) | (g & 3);
    else if constexpr (kVBytes == 16) return ((g >> 1) << 3) | (((t ^ (g >> 1)) & 3) << 1) | (g & 1);
    else return 4 * g + ((t + g) & 3);
  }
  RK_HOST_DEVICE static constexpr int v_slot(int kb, int q, int c, int lane) {
    return ((kb * 4 + q) * 32 + v_pos(lane)) * kVBytes + c * kVCopy;
  }
  // Key row (in the tile) of K copy (kb, h) and of V copy (kb, q), for lane g = lane / 4, t.
  RK_HOST_DEVICE static constexpr int k_row(int kb, int h, int g) { return kb * 16 + g + 8 * h; }
  RK_HOST_DEVICE static constexpr int v_row(int kb, int q, int t) { return kb * 16 + 2 * t + (q & 1) + 8 * (q >> 1); }
  // Output dim of O^T element (block db, row g + 8 h) of lane group g.
  RK_HOST_DEVICE static constexpr int out_dim(int db, int g, int h) { return g * kVBytes + 2 * db + h; }
};

// 4 or 8 or 16 bytes of a lane's V copy from shared memory as words.
template <int N>
RK_DEVICE void lds_words(uint32_t (&w)[4], const uint8_t* src) {
  if constexpr (N == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
  } else {
    static_assert(N == 8, "V copies of 8 or 16 bytes");
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    w[0] = v.x; w[1] = v.y; w[2] = w[3] = 0u;
  }
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
