// hip/mma.h -- warp-level matrix building blocks for attention, one interface over three backends.
//
// The attention kernels think in 16x16 blocks: S(16 queries x 16 keys) += Q(16x16) K^T and
// O(16 queries x 16 dims) += P(16x16) V(16x16), with fp16/bf16 operands and fp32 accumulators.
// Each backend stores a block differently across the lanes of a warp/wave; the kernel never
// looks inside a fragment, it only asks an accumulator which (query, key-or-dim) each of its
// elements is (acc_query / acc_other) and reduces over the lanes that share a query row.
//
//   RADIXKV_MMA_NV    NVIDIA sm_80+: mma.sync.m16n8k16 (two n8 halves per block), ldmatrix,
//                     cp.async. Rows of S are queries: the S accumulator is bit-for-bit the
//                     A operand of P*V, so P never leaves registers.
//   RADIXKV_MMA_MFMA  AMD gfx90a / gfx94x (wave64): v_mfma_f32_16x16x16{f16,bf16_1k}. The
//                     blocks are computed transposed (S^T = K Q^T, O^T = V^T P^T), which makes
//                     the S^T accumulator the B operand of the second product, again without
//                     a trip through shared memory.
//   RADIXKV_MMA_FMA   AMD parts without matrix cores (gfx906, Hygon Z100 class): the MFMA
//                     layout emulated with wave shuffles and FMAs. Same fragments, same
//                     results, much slower; it exists so one kernel source runs everywhere.
//
// Shared-memory tiles are [rows][kCols] 16-bit elements with the 16-byte chunks of each row
// XOR-swizzled by (row % 8) (smem_index), so that ldmatrix and cp.async are bank-conflict free.
// Element types are platform.h's rk::f16_t / rk::bf16_t: operands move as raw 16-bit patterns and
// are only converted when P is packed and when O is written.
#pragma once

#include "platform.h"

// Backend choice. Only the device pass picks a matrix path; the host pass of an AMD build lands
// on RADIXKV_MMA_FMA, where nothing is executed (the types only have to exist for kernel stubs).
#if RK_NVIDIA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "radixkv mma.h: the NVIDIA path needs sm_80 or newer (mma.sync m16n8k16 bf16, cp.async)"
#endif
#define RADIXKV_MMA_NV 1
#elif defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define RADIXKV_MMA_MFMA 1
#else
#define RADIXKV_MMA_FMA 1  // gfx906-class parts (no matrix cores) and the AMD host pass
#endif

namespace rk {
namespace mma {

// Element types are platform.h's storage types: rk::f16_t (IEEE half), rk::bf16_t (bfloat16).
// pack2: two floats -> two 16-bit elements in one word (lo in the low half). NVIDIA has a
// one-instruction converter for both types (F2FP); elsewhere platform.h's Convert does it.
template <class T>
RK_DEVICE uint32_t pack2(float lo, float hi) { return Convert<T>::pack2(lo, hi); }
#if RK_NVIDIA
template <>
RK_DEVICE uint32_t pack2<bf16_t>(float lo, float hi) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
template <>
RK_DEVICE uint32_t pack2<f16_t>(float lo, float hi) {
  uint32_t w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
#endif

// ---------------------------------------------------------------------------------------------
// Shared-memory tile addressing and global->shared copies.
// ---------------------------------------------------------------------------------------------

// Element index of (row, col) in a swizzled [rows][kCols] tile of 16-bit elements. Needs
// kCols >= 64 (8 chunks of 8 elements per row) for the XOR to stay inside the row.
template <int kCols>
RK_DEVICE int smem_index(int row, int col) {
  static_assert(kCols % 64 == 0, "swizzled tiles need rows of at least 8 x 16 bytes");
  return row * kCols + ((((col >> 3) ^ row) & 7) | (col >> 3 & ~7)) * 8 + (col & 7);
}

// Copy 16 bytes global->shared, or write 16 zero bytes when !valid (the source is then not
// read, so it may point anywhere). NVIDIA: asynchronous (cp.async.cg, bypasses L1); complete it
// with async_commit() / async_wait<N>(). AMD: a plain load and store, complete on return.
RK_DEVICE void async_copy16(void* smem, const void* gmem, bool valid) {
#if RK_NVIDIA
  uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0));
#else
  uint4 v = make_uint4(0, 0, 0, 0);
  if (valid) v = *reinterpret_cast<const uint4*>(gmem);
  *reinterpret_cast<uint4*>(smem) = v;
#endif
}
// As async_copy16 with the validity given as the number of source bytes, 16 or 0 (0: write 16
// zero bytes, read nothing; the source must still be a 16-byte aligned address).
RK_DEVICE void async_copy16_bytes(void* smem, const void* gmem, int src_bytes) {
#if RK_NVIDIA
  uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
#else
  async_copy16(smem, gmem, src_bytes != 0);
#endif
}
RK_DEVICE void async_commit() {
#if RK_NVIDIA
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most kPending committed groups are still in flight (this thread's copies only:
// follow with a block barrier before reading what other threads copied).
template <int kPending>
RK_DEVICE void async_wait() {
#if RK_NVIDIA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// ---------------------------------------------------------------------------------------------
// Fragments.
//   Frag: one 16x16 operand block of 16-bit elements (Q, K, P or V), per-lane registers.
//   Acc : one 16x16 fp32 accumulator block (S or O), per-lane registers.
//   kAccElems   elements of Acc held by one lane
//   kRowSlots   distinct query rows a lane touches inside one block (softmax state per slot)
//   acc_query(i), acc_other(i), acc_slot(i): row (query), column (key for S, dim for O) and
//               slot of the lane's element i.
//   row_max / row_sum: reduce a per-lane value over all lanes holding the same query row.
// ---------------------------------------------------------------------------------------------

#if defined(RADIXKV_MMA_NV)

struct Frag { uint32_t x[4]; };
struct Acc { float x[8]; };
constexpr int kAccElems = 8;
constexpr int kRowSlots = 2;

// m16n8k16 C layout, two n8 halves: lane = 4*g + t holds rows g, g+8 and columns 2t, 2t+1 of
// each half; element i: half i/4, row g + 8*((i/2)%2), column 8*(i/4) + 2t + i%2.
RK_DEVICE int acc_query(int i) { return (threadIdx.x & 31) / 4 + 8 * ((i >> 1) & 1); }
RK_DEVICE int acc_other(int i) { return 2 * (threadIdx.x & 3) + (i & 1) + 8 * (i >> 2); }
RK_DEVICE constexpr int acc_slot(int i) { return (i >> 1) & 1; }
// slot s of this lane is query row (lane/4) + 8*s of the block
RK_DEVICE int slot_query(int s) { return (threadIdx.x & 31) / 4 + 8 * s; }

RK_DEVICE float row_max(float v) {
  v = fmaxf(v, shfl_xor(v, 1));
  return fmaxf(v, shfl_xor(v, 2));
}
RK_DEVICE float row_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}

// Operand loads from shared memory. Each lane's address inside a 16x16 block depends only on
// the lane and the operand's role, so it is computed once per kernel (lane_q / lane_k / lane_v,
// for block (0, 0) of a tile whose base is 128-byte aligned). For block (row0, col0), with row0 a
// multiple of 8 and col0 of 16, the swizzle then reduces to one XOR of bits 4-6 plus a constant:
// addr = (lane ^ 16 * (chunk % 8)) + row0 * row_bytes + 16 * (chunk & ~7), chunk = col0 / 8.
// After unrolling, every (row0, col0) is a compile-time constant: one LOP3 per ldmatrix.
using SmemLane = uint32_t;  // shared-space byte address

template <int kCols>
RK_DEVICE SmemLane lane_addr(const uint16_t* tile, int r, int cb) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return base + r * (kCols * 2) + (((cb ^ r) & 7) << 4);
}
template <int kCols>
RK_DEVICE uint32_t block_addr(SmemLane lane, int row0, int col0) {
  const int c = col0 >> 3;
  return (lane ^ ((c & 7) << 4)) + row0 * (kCols * 2) + ((c & ~7) << 4);
}
// A lane address moved by `elems` elements (e.g. to the other half of a double buffer); elems * 2
// must be a multiple of 128.
RK_DEVICE SmemLane lane_offset(SmemLane lane, int elems) { return lane + elems * 2; }

// The row and 16-byte chunk inside a 16x16 block that this lane points ldmatrix.x4 at, per
// operand role (the same for every tile layout).
// Q as the A operand (rows = queries, k = dims): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
RK_DEVICE int q_lane_row() { return threadIdx.x & 15; }
RK_DEVICE int q_lane_chunk() { return (threadIdx.x & 31) >> 4; }
// K as B operands of the two n8 halves (keys 0-7, 8-15), k = dims.
RK_DEVICE int k_lane_row() { return (threadIdx.x & 7) + ((threadIdx.x & 31) >> 4) * 8; }
RK_DEVICE int k_lane_chunk() { return (threadIdx.x >> 3) & 1; }
// V as B operands (k = keys) of the two n8 halves (dims 0-7, 8-15): ldmatrix.trans.
RK_DEVICE int v_lane_row() { return (threadIdx.x & 7) + ((threadIdx.x >> 3) & 1) * 8; }
RK_DEVICE int v_lane_chunk() { return (threadIdx.x & 31) >> 4; }

template <int kCols>
RK_DEVICE SmemLane lane_q(const uint16_t* tile) {
  return lane_addr<kCols>(tile, q_lane_row(), q_lane_chunk());
}
template <int kCols>
RK_DEVICE SmemLane lane_k(const uint16_t* tile) {
  return lane_addr<kCols>(tile, k_lane_row(), k_lane_chunk());
}
template <int kCols>
RK_DEVICE SmemLane lane_v(const uint16_t* tile) {
  return lane_addr<kCols>(tile, v_lane_row(), v_lane_chunk());
}

RK_DEVICE void ldmatrix_x4_at(Frag& f, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
               : "r"(a));
}
RK_DEVICE void ldmatrix_x4_trans_at(Frag& f, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
               : "r"(a));
}
// Q block: queries row0.. x dims col0..
template <int kCols>
RK_DEVICE void load_q(Frag& f, SmemLane lane, int row0, int col0) {
  ldmatrix_x4_at(f, block_addr<kCols>(lane, row0, col0));
}
// K block: keys key0.. x dims col0..
template <int kCols>
RK_DEVICE void load_k(Frag& f, SmemLane lane, int key0, int col0) {
  ldmatrix_x4_at(f, block_addr<kCols>(lane, key0, col0));
}
// V block: keys key0.. x dims dim0..
template <int kCols>
RK_DEVICE void load_v(Frag& f, SmemLane lane, int key0, int dim0) {
  ldmatrix_x4_trans_at(f, block_addr<kCols>(lane, key0, dim0));
}

template <class T>
RK_DEVICE void mma_16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
template <>
RK_DEVICE void mma_16816<f16_t>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
RK_DEVICE void mma_16816<bf16_t>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// S(16q x 16k) += Q K^T
template <class T>
RK_DEVICE void mma_qk(Acc& s, const Frag& q, const Frag& k) {
  mma_16816<T>(s.x, q.x, k.x[0], k.x[1]);
  mma_16816<T>(s.x + 4, q.x, k.x[2], k.x[3]);
}
// P operand from an S accumulator (already exponentiated): same lanes, same order.
template <class T>
RK_DEVICE void p_from_acc(Frag& p, const Acc& s) {
  p.x[0] = pack2<T>(s.x[0], s.x[1]);
  p.x[1] = pack2<T>(s.x[2], s.x[3]);
  p.x[2] = pack2<T>(s.x[4], s.x[5]);
  p.x[3] = pack2<T>(s.x[6], s.x[7]);
}
// O(16q x 16d) += P V
template <class T>
RK_DEVICE void mma_pv(Acc& o, const Frag& p, const Frag& v) {
  mma_16816<T>(o.x, p.x, v.x[0], v.x[1]);
  mma_16816<T>(o.x + 4, p.x, v.x[2], v.x[3]);
}

// Row sums of P on the tensor cores: P(16x16) x ones(16x8) puts each row's sum in every column
// of an m16n8 accumulator (x[0], x[1]: row lane/4; x[2], x[3]: row lane/4 + 8), already summed
// over the lanes of the row, and over the same 16-bit P values that the P*V product uses.
struct RowSum { float x[4]; };
template <class T> RK_DEVICE constexpr uint32_t ones2();
template <> RK_DEVICE constexpr uint32_t ones2<bf16_t>() { return 0x3f803f80u; }
template <> RK_DEVICE constexpr uint32_t ones2<f16_t>() { return 0x3c003c00u; }
template <class T>
RK_DEVICE void rowsum_add(RowSum& r, const Frag& p) {
  mma_16816<T>(r.x, p.x, ones2<T>(), ones2<T>());
}
RK_DEVICE void rowsum_scale(RowSum& r, int slot, float f) {
  r.x[2 * slot] *= f;
  r.x[2 * slot + 1] *= f;
}

// Narrow blocks (NVIDIA; decode with <= 8 query heads per KV head): the products run transposed,
// 16 keys (or dims) as the rows and the group's query heads as the 8 columns of one m16n8k16, so
// no rows are padding: S^T(16 keys x 8 heads) += K Q^T, O^T(16 dims x 8 heads) += V^T P^T.
//   K as the A operand: load_q on the K tile (same roles: 16 rows x 16 k).
//   Q^T as the B operand: x[0], x[1] of load_k on the Q tile (heads 0-7 as the n8 half).
//   V^T as the A operand: ldmatrix.trans with the K lanes' addresses (rows = keys).
//   P^T as the B operand: the S^T accumulator's two 8x8 halves, each transposed in registers.
// Accumulator (float[4]): x[0], x[1] at row lane/4, columns 2 (lane%4) and +1; x[2], x[3] at row
// lane/4 + 8.
template <int kCols>
RK_DEVICE void load_vt(Frag& f, SmemLane lane_k, int key0, int dim0) {
  ldmatrix_x4_trans_at(f, block_addr<kCols>(lane_k, key0, dim0));
}
// Reduce a per-lane value over the 8 lanes holding the same heads (equal lane % 4): all keys of
// a narrow S^T block's two head columns.
RK_DEVICE float head_max(float v) {
  v = fmaxf(v, shfl_xor(v, 4));
  v = fmaxf(v, shfl_xor(v, 8));
  return fmaxf(v, shfl_xor(v, 16));
}
RK_DEVICE float head_sum(float v) {
  v += shfl_xor(v, 4);
  v += shfl_xor(v, 8);
  return v + shfl_xor(v, 16);
}
RK_DEVICE uint32_t transpose8x8(uint32_t v) {
  uint32_t t;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(t) : "r"(v));
  return t;
}
// P^T B operand (keys x heads) from an exponentiated S^T accumulator.
template <class T>
RK_DEVICE void pt_from_acc(uint32_t& b0, uint32_t& b1, const float* s) {
  b0 = transpose8x8(pack2<T>(s[0], s[1]));
  b1 = transpose8x8(pack2<T>(s[2], s[3]));
}
RK_DEVICE float rowsum_get(const RowSum& r, int slot) { return r.x[2 * slot]; }
constexpr bool kHasMmaRowSum = true;

#else  // AMD: MFMA layout (real on gfx90a/gfx94x, emulated on the rest)

// v_mfma_f32_16x16x16 layout (wave64): A[i][k] in lane i + 16*(k/4), item k%4; B[k][j] in lane
// j + 16*(k/4), item k%4; D[i][j] in lane j + 16*(i/4), item i%4. We compute S^T = K Q^T
// (A = K, B = Q^T) and O^T = V^T P^T (A = V^T, B = P^T = the S^T accumulator).
struct Frag { uint32_t x[2]; };  // 4 elements: item 2r in the low half of x[r]
struct Acc { float x[4]; };
constexpr int kAccElems = 4;
constexpr int kRowSlots = 1;

RK_DEVICE int acc_query(int) { return threadIdx.x & 15; }
RK_DEVICE int acc_other(int i) { return 4 * ((threadIdx.x & 63) >> 4) + i; }
RK_DEVICE constexpr int acc_slot(int) { return 0; }
RK_DEVICE int slot_query(int) { return threadIdx.x & 15; }

RK_DEVICE float row_max(float v) {
  v = fmaxf(v, shfl_xor(v, 16));
  return fmaxf(v, shfl_xor(v, 32));
}
RK_DEVICE float row_sum(float v) {
  v += shfl_xor(v, 16);
  return v + shfl_xor(v, 32);
}

// Operand loads. LDS addressing is cheap here (no ldmatrix), so a "lane" is just the tile.
using SmemLane = const uint16_t*;
template <int kCols> RK_DEVICE SmemLane lane_q(const uint16_t* tile) { return tile; }
template <int kCols> RK_DEVICE SmemLane lane_k(const uint16_t* tile) { return tile; }
template <int kCols> RK_DEVICE SmemLane lane_v(const uint16_t* tile) { return tile; }
RK_DEVICE SmemLane lane_offset(SmemLane lane, int elems) { return lane + elems; }

// Row operand (Q as B, K as A): lane holds row r0 + lane%16, dims c0 + 4*(lane/16) .. +3.
template <int kCols>
RK_DEVICE void load_rows4(Frag& f, const uint16_t* tile, int row0, int col0) {
  const int lane = threadIdx.x & 63;
  const uint2 v = *reinterpret_cast<const uint2*>(
      tile + smem_index<kCols>(row0 + (lane & 15), col0 + 4 * (lane >> 4)));
  f.x[0] = v.x;
  f.x[1] = v.y;
}
template <int kCols>
RK_DEVICE void load_q(Frag& f, SmemLane tile, int row0, int col0) {
  load_rows4<kCols>(f, tile, row0, col0);
}
template <int kCols>
RK_DEVICE void load_k(Frag& f, SmemLane tile, int key0, int col0) {
  load_rows4<kCols>(f, tile, key0, col0);
}
// V^T as A: lane holds dim d0 + lane%16 of keys k0 + 4*(lane/16) .. +3 (a column gather).
template <int kCols>
RK_DEVICE void load_v(Frag& f, SmemLane tile, int key0, int dim0) {
  const int lane = threadIdx.x & 63;
  const int d = dim0 + (lane & 15);
  const int k = key0 + 4 * (lane >> 4);
  uint32_t e0 = tile[smem_index<kCols>(k + 0, d)];
  uint32_t e1 = tile[smem_index<kCols>(k + 1, d)];
  uint32_t e2 = tile[smem_index<kCols>(k + 2, d)];
  uint32_t e3 = tile[smem_index<kCols>(k + 3, d)];
  f.x[0] = e0 | (e1 << 16);
  f.x[1] = e2 | (e3 << 16);
}

#if defined(RADIXKV_MMA_MFMA)
typedef float v4f __attribute__((ext_vector_type(4)));
typedef _Float16 v4h __attribute__((ext_vector_type(4)));
typedef short v4s __attribute__((ext_vector_type(4)));

template <class T>
RK_DEVICE void mfma(Acc& c, const Frag& a, const Frag& b);
template <>
RK_DEVICE void mfma<f16_t>(Acc& c, const Frag& a, const Frag& b) {
  v4f acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
  acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(v4h, a), __builtin_bit_cast(v4h, b),
                                              acc, 0, 0, 0);
  c.x[0] = acc[0]; c.x[1] = acc[1]; c.x[2] = acc[2]; c.x[3] = acc[3];
}
template <>
RK_DEVICE void mfma<bf16_t>(Acc& c, const Frag& a, const Frag& b) {
  v4f acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(v4s, a),
                                                  __builtin_bit_cast(v4s, b), acc, 0, 0, 0);
  c.x[0] = acc[0]; c.x[1] = acc[1]; c.x[2] = acc[2]; c.x[3] = acc[3];
}
#else
// Emulation of the MFMA contract: lane l computes D[4*(l/16)+it][l%16], it = 0..3, fetching
// the A rows and B column it needs from the lanes that own them.
template <class T>
RK_DEVICE void mfma(Acc& c, const Frag& a, const Frag& b) {
  const int lane = threadIdx.x & 63;
  const int col = lane & 15;
  const int rbase = 4 * (lane >> 4);
  float bcol[16];
#pragma unroll
  for (int kg = 0; kg < 4; ++kg) {
    const uint32_t lo = shfl(b.x[0], col + 16 * kg);
    const uint32_t hi = shfl(b.x[1], col + 16 * kg);
    Convert<T>::unpack2(lo, bcol[4 * kg + 0], bcol[4 * kg + 1]);
    Convert<T>::unpack2(hi, bcol[4 * kg + 2], bcol[4 * kg + 3]);
  }
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    float acc = c.x[it];
#pragma unroll
    for (int kg = 0; kg < 4; ++kg) {
      const uint32_t lo = shfl(a.x[0], rbase + it + 16 * kg);
      const uint32_t hi = shfl(a.x[1], rbase + it + 16 * kg);
      float a0, a1, a2, a3;
      Convert<T>::unpack2(lo, a0, a1);
      Convert<T>::unpack2(hi, a2, a3);
      acc = fmaf(a0, bcol[4 * kg + 0], acc);
      acc = fmaf(a1, bcol[4 * kg + 1], acc);
      acc = fmaf(a2, bcol[4 * kg + 2], acc);
      acc = fmaf(a3, bcol[4 * kg + 3], acc);
    }
    c.x[it] = acc;
  }
}
#endif

// S^T(16k x 16q) += K Q^T
template <class T>
RK_DEVICE void mma_qk(Acc& s, const Frag& q, const Frag& k) { mfma<T>(s, k, q); }
template <class T>
RK_DEVICE void p_from_acc(Frag& p, const Acc& s) {
  p.x[0] = pack2<T>(s.x[0], s.x[1]);
  p.x[1] = pack2<T>(s.x[2], s.x[3]);
}
// O^T(16d x 16q) += V^T P^T
template <class T>
RK_DEVICE void mma_pv(Acc& o, const Frag& p, const Frag& v) { mfma<T>(o, v, p); }

#endif

#if !defined(RADIXKV_MMA_NV)
struct RowSum { float x[4]; };  // unused off NVIDIA (row sums are plain FADDs there)
template <class T> RK_DEVICE void rowsum_add(RowSum&, const Frag&) {}
RK_DEVICE void rowsum_scale(RowSum&, int, float) {}
RK_DEVICE float rowsum_get(const RowSum& r, int) { return r.x[0]; }
constexpr bool kHasMmaRowSum = false;
#endif

RK_DEVICE void zero(Acc& a) {
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) a.x[i] = 0.f;
}

}  // namespace mma
}  // namespace rk
