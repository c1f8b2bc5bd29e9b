// paged_decode.h — params and launcher of paged decode attention (torch-free, device-free).
//
// One query token per request attends over its paged KV context. The work is a plan of units
// (radixkv-core's metadata/plan.rs, built on the host where the lengths are): unit u covers KV
// positions [kv_start, kv_end) of one request, and requests are cut into units of about equal
// length, so long requests get many and short ones one. One block per (unit, KV head, chunk of the
// GQA group): each block loads a KV tile of one KV head once and applies it to every query head of
// its chunk (16 heads per chunk on the matrix units). A request of one unit writes its output
// directly; a request of several writes one partial state per unit to the workspace, and the last
// block of a (request, KV head, chunk) to finish merges them (softmax.h explains the math). The
// CUDA-core kernel of parts without matrix units merges them in a second kernel instead.
#pragma once

#include "common.h"

namespace rk {

// Most units one request may be cut into (the merges stage this many partials' (m, l) in shared
// memory); radixkv-core's metadata/plan.rs (MAX_UNITS_PER_REQUEST) keeps plans within it.
constexpr int kMaxUnits = 256;

struct PagedDecodeParams {
  // Tensors. Element strides are int64; the last (head_dim) axis of every tensor is contiguous.
  const void* q;             // [B, H_q, D]  fp16/bf16, contiguous
  const void* k_cache;       // [num_pages, page_size, H_kv, D] (bshd) or [num_pages, H_kv, page_size, D] (bhsd)
  const void* v_cache;       // same shape and strides as k_cache
  void* out;                 // [B, H_q, D]  same dtype as q, contiguous
  const int32_t* kv_indptr;  // [B + 1] CSR row pointers into page_table, or nullptr (block-table mode)
  const int32_t* page_table; // CSR: kv_indices [nnz]; block-table mode: [B, max_blocks] row-major
  const int32_t* kv_lens;    // [B] valid tokens per request
  float* workspace;          // partials per unit: o [plan_capacity, H_q, D] then m, l
                             // [plan_capacity, H_q]; fp32
  int32_t* counters;         // merge counters [B, H_kv, ceil(G / 16)]: zero before a launch, and
                             // every launch leaves them zero
  // The work plan (layout: metadata/plan.rs): units [plan_capacity][4] = (request, kv_start,
  // kv_end, units of that request), unused rows (-1, 0, 0, 0); then first_unit [B]. 16-byte
  // aligned. Ranges are clamped to the request's tokens on the device; a bad row is recorded.
  const int32_t* plan;
  int32_t plan_capacity;

  int64_t q_stride_b, q_stride_h;                 // elements
  int64_t kv_stride_page, kv_stride_slot, kv_stride_head;  // elements, same for k_cache and v_cache
  int64_t table_stride;      // block-table mode: elements between rows of page_table
  int32_t table_cols;        // block-table mode: max_blocks (pages beyond it are never read)
  int32_t num_pages;         // pages in the pool: a page index outside [0, num_pages) reads nothing
  int64_t table_len;         // CSR mode: entries of kv_indices (kv_indptr is clamped to it)
  uint32_t* status;          // guard.h's status word [2]: faults found, and which kernel ran
  int32_t kernel;            // 0: the default for this device, 1: matrix units, 2: CUDA cores

  int32_t batch, num_q_heads, num_kv_heads, head_dim, page_size;
  float sm_scale;            // softmax scale in natural units; kernels fold in log2(e)
  DType dtype;
  // FP8 caches (kv_type != kSame): K/V elements are 8-bit floats with per-tensor or per-KV-head
  // float32 scales on the device (fp8_decode.h); cache strides then count bytes.
  KVType kv_type = KVType::kSame;
  KVScales scales;
};

// Throws rk::Unsupported for a head_dim / page_size / dtype without a compiled kernel, and
// rk::LaunchError if a launch fails. Enqueues work on `stream` only: no sync, no allocation.
void launch_paged_decode(const PagedDecodeParams& p, Stream stream);

// Per-head-dim launchers (paged_decode_d64.cu, ...), split so builds parallelise.
void launch_paged_decode_d64(const PagedDecodeParams& p, Stream stream);
void launch_paged_decode_d128(const PagedDecodeParams& p, Stream stream);
void launch_paged_decode_d256(const PagedDecodeParams& p, Stream stream);

}  // namespace rk
