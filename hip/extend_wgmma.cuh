// hip/extend_wgmma.cuh -- Hopper warpgroup matrix products (wgmma, sm_90a) for the extend kernel.
//
// In a build for sm_90a (RK_HAS_WGMMA, set from the compiler's target), the extend kernel
// (D = 128) computes
//   S(64 x 64 per instruction block) = Q K^T   wgmma m64n64k16, Q and K from shared memory
//   O(64 x 128)                     += P V     wgmma m64n128k16, P from registers, V from shared
//                                              memory read transposed (MN-major)
// for each of the tile's two 64-row halves, the four warps of the CTA forming one warpgroup. The
// accumulators keep mma.h's NVIDIA layout per warp (warp w holds rows 16w..16w+15 of a 64-row
// half, element i of 16-column block b is register 8b + i), so the softmax code is shared with
// the mma.sync path, and an S block converts to the P operand of the next product in registers.
//
// Shared-memory tiles are the 128-byte-swizzle canonical layout: a [rows][D] tile is stored as
// D / 64 column halves of [rows][64] elements (128-byte rows, 16-byte chunk c of row r at chunk
// c ^ (r % 8)), each half 1024-byte aligned. Descriptors (PTX ISA, "matrix descriptor"):
//   K-major (Q, K): stride byte offset 1024 (8-row groups), leading offset unused (1); the k-th
//                   16-column step starts 32 bytes further inside a half;
//   MN-major (V):   leading byte offset = distance between column halves (rows * 128), stride
//                   byte offset 1024 (8-key groups); the k-th 16-key step starts k * 2048 in.
#pragma once

#include <type_traits>

#include "platform.h"

// The device pass of an sm_90a target: the only one where wgmma exists (not a switch).
#if RK_NVIDIA && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RK_HAS_WGMMA 1
#else
#define RK_HAS_WGMMA 0
#endif

namespace rk {
namespace wgmma {

// Element index of (row, col) in a 128-byte-swizzled [kRows][D] tile stored as column halves.
template <int kRows>
RK_HOST_DEVICE constexpr int sw128_index(int row, int col) {
  return (col >> 6) * (kRows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

#if RK_HAS_WGMMA

RK_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Order this thread's earlier ordinary (generic proxy) shared-memory writes, e.g. cp.async copies
// waited for, before the tensor cores' reads of them (async proxy).
RK_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

RK_DEVICE uint64_t desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo_bytes & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

// Order earlier register writes before the warpgroup's next products (and their reads).
RK_DEVICE void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
RK_DEVICE void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
RK_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pin a register to this point of the program (accumulators are written asynchronously: no use
// may move above the wait, no definition below the issue).
RK_DEVICE void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
template <class Acc, int N>
RK_DEVICE void fence_operands(Acc (&a)[N]) {
#pragma unroll
  for (int b = 0; b < N; ++b)
#pragma unroll
    for (int i = 0; i < 8; ++i) fence_operand(a[b].x[i]);
}
template <class Acc, int M, int N>
RK_DEVICE void fence_operands(Acc (&a)[M][N]) {
#pragma unroll
  for (int m = 0; m < M; ++m) fence_operands(a[m]);
}


// Accumulator operands of the products below: blocks of 8 floats, bound read-write ("+f") or,
// when the product overwrites them, write-only ("=f"). CON is the constraint literal.
#define RK_WG_BLOCK(CON, d, b)                                                                  \
  CON(d[b].x[0]), CON(d[b].x[1]), CON(d[b].x[2]), CON(d[b].x[3]), CON(d[b].x[4]), CON(d[b].x[5]), \
      CON(d[b].x[6]), CON(d[b].x[7])
#define RK_WG_BLOCKS4(CON, d) \
  RK_WG_BLOCK(CON, d, 0), RK_WG_BLOCK(CON, d, 1), RK_WG_BLOCK(CON, d, 2), RK_WG_BLOCK(CON, d, 3)
#define RK_WG_BLOCKS8(CON, d) \
  RK_WG_BLOCKS4(CON, d), RK_WG_BLOCK(CON, d, 4), RK_WG_BLOCK(CON, d, 5), RK_WG_BLOCK(CON, d, 6), \
      RK_WG_BLOCK(CON, d, 7)

// d (4 blocks of 16 keys) {=, +=} A(64 x 16, smem) B(64 x 16, smem)^T; TY the PTX element type.
#define RK_WG_SS_M64N64K16(TY, CON)                                                             \
  asm volatile(                                                                                \
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." \
      TY "." TY " "                                                                            \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                 \
      : RK_WG_BLOCKS4(CON, d)                                                                  \
      : "l"(da), "l"(db), "r"(int(accumulate)))
// d (8 blocks of 16 dims) += A(64 x 16, registers: mma.h's P fragment per warp) B(16 x 128,
// smem, MN-major).
#define RK_WG_RS_M64N128K16(TY)                                                                  \
  asm volatile(                                                                                 \
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." \
      TY "." TY " "                                                                             \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                   \
      : RK_WG_BLOCKS8("+f", d)                                                                  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))

// d (4 blocks of 16 keys) {=, +=} A(64 x 16, registers: mma.h's A fragment per warp) B(64 x 16,
// smem, K-major)^T.
#define RK_WG_RS_M64N64K16(TY, CON)                                                             \
  asm volatile(                                                                                \
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." \
      TY "." TY " "                                                                            \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n" \
      : RK_WG_BLOCKS4(CON, d)                                                                  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(int(accumulate)))

template <class T, class Acc>
RK_DEVICE void ss_m64n64k16(Acc (&d)[4], uint64_t da, uint64_t db, bool accumulate) {
  if constexpr (std::is_same<T, bf16_t>::value) {
    if (accumulate) RK_WG_SS_M64N64K16("bf16", "+f");
    else RK_WG_SS_M64N64K16("bf16", "=f");
  } else {
    if (accumulate) RK_WG_SS_M64N64K16("f16", "+f");
    else RK_WG_SS_M64N64K16("f16", "=f");
  }
}
template <class T, class Acc>
RK_DEVICE void rs_m64n64k16(Acc (&d)[4], const uint32_t (&a)[4], uint64_t db, bool accumulate) {
  if constexpr (std::is_same<T, bf16_t>::value) {
    if (accumulate) RK_WG_RS_M64N64K16("bf16", "+f");
    else RK_WG_RS_M64N64K16("bf16", "=f");
  } else {
    if (accumulate) RK_WG_RS_M64N64K16("f16", "+f");
    else RK_WG_RS_M64N64K16("f16", "=f");
  }
}
template <class T, class Acc>
RK_DEVICE void rs_m64n128k16(Acc (&d)[8], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (std::is_same<T, bf16_t>::value) {
    RK_WG_RS_M64N128K16("bf16");
  } else {
    RK_WG_RS_M64N128K16("f16");
  }
}

#undef RK_WG_SS_M64N64K16
#undef RK_WG_RS_M64N64K16
#undef RK_WG_RS_M64N128K16
#undef RK_WG_BLOCKS8
#undef RK_WG_BLOCKS4
#undef RK_WG_BLOCK

#endif  // RK_HAS_WGMMA

}  // namespace wgmma
}  // namespace rk
