// guard.h — kernel input checks on the device: fault codes, clamping helpers and the status word.
//
// Kernels never read outside q, the index tensors or the pool, whatever the metadata says: bad
// entries are clamped or skipped (the helpers below). Every fault is recorded in a per-device
// status word (an int32 buffer the caller passes in, `status`) by atomicOr of one bit per
// (op, check), so the caller can read it later without a sync in the op path and the ops stay
// graph-safe (python/radixkv/ops/_status.py decodes it; keep its tables in step with this file).
//
//   status[0]  fault bits: bit 8 * op + check
//   status[1]  kernels that ran: bit per Kernel below, set by block 0 of each launch
//   status[2]  faults of no one op's byte: bit per Extra below
//
// Checks sit where the value is loaded anyway (per request, per page entry), never in an inner
// loop of their own, and the report itself is a branch not taken on good input.
#pragma once

#include <stdint.h>

namespace rk {
namespace guard {

enum Op : int { kStoreKV = 0, kCopyBlocks = 1, kPagedDecode = 2, kExtend = 3 };

// Check bits (within an op's byte).
enum Check : uint32_t {
  kPageRange = 1u << 0,       // a page index (kv_indices, block_tables, copy pairs) outside [0, num_pages)
  kIndptrOrder = 1u << 1,     // kv_indptr negative or decreasing
  kIndptrOverrun = 1u << 2,   // kv_indptr past the end of kv_indices
  kLenNegative = 1u << 3,     // kv_lens < 0
  kLenBeyondPages = 1u << 4,  // kv_lens beyond the tokens the request's pages hold
  kQoIndptr = 1u << 5,        // qo_indptr negative, decreasing or past the rows of q
  kQueriesExceedKeys = 1u << 6,  // L_q > L_k (extend: NaN rows)
  kSlotRange = 1u << 7,       // a store_kv slot >= num_pages * page_size
};

// Kernels (status[1]): which one ran, so a caller can check that a kernel choice held.
enum Kernel : uint32_t {
  kRanMma = 1u << 0,         // decode, matrix units
  kRanMmaNarrow = 1u << 1,   // decode, matrix units, transposed (groups <= 8)
  kRanCudaCore = 1u << 2,    // decode, CUDA cores
  kRanExtend = 1u << 3,      // extend, extend_attention_kernel.cuh
  kRanExtendWs = 1u << 4,    // extend, the warp-specialised kernel of extend_ws.cuh
  kRanMma8Warps = 1u << 5,   // decode, matrix units, the 8-warp shape of long FP8 units
};

// status[2]: a decode plan row naming no request of the batch, a range that is not a range, a
// unit count outside [1, 256], a first unit outside the plan, or the units of a request that
// disagree (the row is skipped or clamped, or its request's units are not merged); an extend plan
// entry naming no tile of the batch (skipped), or a plan whose entry count is not the batch's
// tile count (kExtendPlan); and an FP8
// k_scale / v_scale read on the device that is not finite and > 0 (the op then writes NaN: store_kv
// NaN codes, the attention ops NaN rows), one bit per (op, scale). The op bytes of status[0] are
// full, hence here.
enum Extra : uint32_t {
  kDecodePlan = 1u << 0,
  kStoreKScale = 1u << 1,
  kStoreVScale = 1u << 2,
  kDecodeKScale = 1u << 3,
  kDecodeVScale = 1u << 4,
  kExtendKScale = 1u << 5,
  kExtendVScale = 1u << 6,
  kExtendPlan = 1u << 7,
};

constexpr int kStatusWords = 3;

#if defined(__CUDACC__) || defined(__HIP__)
}  // namespace guard
}  // namespace rk
#include "platform.h"
namespace rk {
namespace guard {

// Record `checks` of `op`; no-op for 0 (the common case: one not-taken branch).
__device__ __forceinline__ void report(uint32_t* status, Op op, uint32_t checks) {
  if (checks != 0u && status != nullptr) atomicOr(status, checks << (8 * op));
}

// Record `bits` of Extra.
__device__ __forceinline__ void report_extra(uint32_t* status, uint32_t bits) {
  if (bits != 0u && status != nullptr) atomicOr(status + 2, bits);
}

// What one thread found wrong, recorded once where its kernel ends (or leaves early). A report
// is a branch around an atomic, and the compiler moves no load across one: checks that reported
// where they found a fault would hold each later load until the checked value arrived.
struct Faults {
  uint32_t checks = 0;  // Check bits of the kernel's op
  uint32_t extra = 0;   // Extra bits
};
__device__ __forceinline__ void report(uint32_t* status, Op op, const Faults& f) {
  report(status, op, f.checks);
  report_extra(status, f.extra);
}

// `bit` when the scale `s` is not usable (platform.h fp8_scale_ok; fp8_checked_scale turns it into
// NaN), else 0.
__device__ __forceinline__ uint32_t scale_fault(float s, uint32_t bit) { return fp8_scale_ok(s) ? 0u : bit; }

// Record that `kernel` ran: thread 0 of block (0, 0, 0) only.
__device__ __forceinline__ void ran(uint32_t* status, uint32_t kernel) {
  if (status != nullptr && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
    atomicOr(status + 1, kernel);
}

// One request's CSR row of kv_indices, clamped to [0, nnz): rows that are negative, decreasing or
// past the end read only what exists (possibly nothing). `checks` gains what was wrong. Selects,
// not branches, in 32 bits (indptr is int32, so a larger nnz bounds nothing): nothing later waits
// on a branch over the loaded values.
struct Row {
  int begin, count;
};
__device__ __forceinline__ Row csr_clamp(int s0, int s1, int64_t nnz, uint32_t& checks) {
  const int n = nnz < 0x7fffffff ? static_cast<int>(nnz) : 0x7fffffff;
  checks |= (s0 < 0 || s1 < s0) ? kIndptrOrder : 0u;
  checks |= s1 > n ? kIndptrOverrun : 0u;
  const int lo = min(max(s0, 0), n);
  const int hi = min(max(s1, lo), n);
  return Row{lo, hi - lo};
}
__device__ __forceinline__ Row csr_row(const int32_t* indptr, int b, int64_t nnz, uint32_t& checks) {
  return csr_clamp(indptr[b], indptr[b + 1], nnz, checks);
}

// A request's kv_len clamped to what its `pages` pages hold (negative: 0).
__device__ __forceinline__ int clamp_len(int len, int pages, int page_size, uint32_t& checks) {
  const int64_t cap64 = static_cast<int64_t>(max(pages, 0)) * page_size;
  const int cap = cap64 < 0x7fffffff ? static_cast<int>(cap64) : 0x7fffffff;
  checks |= len < 0 ? kLenNegative : (len > cap ? kLenBeyondPages : 0u);
  return min(max(len, 0), cap);
}

// A page-table entry of a key that exists: in range?
__device__ __forceinline__ bool page_ok(int page, int num_pages) {
  return static_cast<unsigned>(page) < static_cast<unsigned>(num_pages);
}

// Extend: every request's metadata, checked by one CTA (threads stride over the batch) so that a
// request without a CTA of its own (L_q <= 0) is checked too, and `kernel` recorded as the kernel
// that ran. With an extend plan (p.tile_plan), also that it has one entry per query tile of
// `tile_rows` rows (each entry's range is checked by the CTA that reads it). Every thread of the
// CTA must call it (it synchronises the CTA when a plan is given). P: ExtendParams.
template <class P>
__device__ void check_extend_batch(const P& p, uint32_t kernel, int tile_rows) {
  uint32_t checks = 0;
  int tiles = 0;  // query tiles of this thread's requests
  const int group = p.num_q_heads / p.num_kv_heads;
  for (int b = threadIdx.x; b < p.batch; b += blockDim.x) {
    const int q0 = p.qo_indptr[b], q1 = p.qo_indptr[b + 1];
    const bool q_ok = q0 >= 0 && q1 >= q0 && q1 <= p.num_q_tokens;  // else: request skipped
    if (!q_ok) checks |= kQoIndptr;
    int pages = p.table_cols;
    if (p.kv_indptr != nullptr) pages = csr_row(p.kv_indptr, b, p.table_len, checks).count;
    const int lk = clamp_len(p.kv_lens[b], pages, p.page_size, checks);
    if (q_ok && p.kv_lens[b] >= 0 && q1 - q0 > lk) checks |= kQueriesExceedKeys;
    if (q1 > q0) tiles += static_cast<int>((int64_t(q1 - q0) * group + tile_rows - 1) / tile_rows);
  }
  uint32_t extra = 0;
  if (p.tile_plan != nullptr) {
    __shared__ int plan_tiles;
    if (threadIdx.x == 0) plan_tiles = 0;
    __syncthreads();
    if (tiles != 0) atomicAdd(&plan_tiles, tiles);
    __syncthreads();
    if (threadIdx.x == 0 && plan_tiles != p.plan_len) extra |= kExtendPlan;
  }
  // FP8 caches: every KV head's scales (16-bit caches have none), read here once rather than in
  // the kernel's tiles.
  if (p.scales.k != nullptr && p.scales.v != nullptr) {
    for (int h = threadIdx.x; h < p.num_kv_heads; h += blockDim.x) {
      extra |= scale_fault(p.scales.k[h * p.scales.stride], kExtendKScale);
      extra |= scale_fault(p.scales.v[h * p.scales.stride], kExtendVScale);
    }
  }
  report(p.status, kExtend, checks);
  report_extra(p.status, extra);
  if (p.status != nullptr && threadIdx.x == 0) atomicOr(p.status + 1, kernel);
}
#endif

}  // namespace guard
}  // namespace rk
