// extend_attention.h — params and launcher of prefix-prefill ("extend") attention (torch-free,
// device-free).
//
// Request b owns queries qo_indptr[b] .. qo_indptr[b+1] (L_q of them): the last L_q positions of
// its L_k = kv_lens[b] tokens, whose K/V (cached prefix and new tokens alike) already sit in the
// paged cache. Query i may attend key j iff j <= i + (L_k - L_q) (docs/contract.md §4).
// The grid is (query tiles, H_kv): a tile's rows are (query position, query head of the KV
// group) pairs, so one K/V tile in shared memory serves the whole GQA group. extend_attention.cu
// explains the two-stage (dense prefix / masked diagonal) walk over the keys.
#pragma once

#include "common.h"

namespace rk {

struct ExtendParams {
  // Tensors. Element strides are int64; the last (head_dim) axis of every tensor is contiguous.
  const void* q;               // [N_q, H_q, D] fp16/bf16
  const void* k_cache;         // [num_pages, page_size, H_kv, D] (bshd) or [num_pages, H_kv, page_size, D] (bhsd);
                               // q's dtype or FP8 (kv_type)
  const void* v_cache;         // same shape, dtype and strides as k_cache
  void* out;                   // [N_q, H_q, D] same dtype as q
  const int32_t* qo_indptr;    // [B + 1] query rows of each request (qo_indptr[B] = N_q)
  const int32_t* kv_indptr;    // [B + 1] CSR row pointers into page_table, or nullptr (block-table mode)
  const int32_t* page_table;   // CSR: kv_indices [nnz]; block-table mode: [B, max_blocks] row-major
  const int32_t* kv_lens;      // [B] valid tokens per request (L_k, new tokens included)

  int64_t q_stride_tok, q_stride_head;      // elements
  int64_t o_stride_tok, o_stride_head;      // elements
  int64_t kv_stride_page, kv_stride_slot, kv_stride_head;  // elements, same for k_cache and v_cache
  int64_t table_stride;        // block-table mode: elements between rows of page_table
  int32_t table_cols;          // block-table mode: max_blocks (pages beyond it are never read)
  int32_t num_pages;           // pages in the pool: a page index outside [0, num_pages) reads zeros
  int64_t table_len;           // CSR mode: entries of kv_indices (kv_indptr is clamped to it)
  uint32_t* status;            // guard.h's status word: faults found

  int32_t batch, num_q_tokens, num_q_heads, num_kv_heads, head_dim, page_size;
  int32_t max_q_len;           // upper bound on any L_q (sizes the grid without reading qo_indptr)
  int32_t max_kv_len;          // the caller's bound on any L_k, 0 if unknown: picks the kernel for
                               // short contexts (a wrong value costs speed, never correctness)
  float sm_scale;              // softmax scale in natural units (> 0); kernels fold in log2(e)
  DType dtype;                 // q's (and out's) type
  // Optional work list built on the host (the extend plan): entry e = (tile_plan[2e], tile_plan[2e+1])
  // = (request, rank of the query tile counted from the request's last, which sees the most keys);
  // CTA x runs entry x / H_kv on KV head x % H_kv, so the plan's order is the launch order. Built
  // for tiles of plan_rows rows: a launcher whose tile height differs ignores it and uses its own
  // order (a plan costs or saves speed, never correctness). 8-byte aligned; nullptr: no plan.
  const int32_t* tile_plan = nullptr;
  int32_t plan_len = 0;        // entries
  int32_t plan_rows = 0;       // the tile height the plan was built for
  // The cache's element type: kSame (q's 16-bit type) or FP8, with float32 scales on the device
  // (stored x scale = real); cache strides count elements of the cache's type either way.
  KVType kv_type = KVType::kSame;
  KVScales scales;
};

// Throws rk::Unsupported for a head_dim / dtype without a compiled kernel, and rk::LaunchError if
// the launch fails. Enqueues work on `stream` only: no sync, no allocation (CUDA-graph safe).
void launch_extend_attention(const ExtendParams& p, Stream stream);

// Rows of a query tile of this build's extend kernels at `head_dim` (what an extend plan is built
// for; every kernel of one head_dim uses the same). Throws rk::Unsupported for a head_dim without
// a compiled kernel.
int extend_tile_rows(int head_dim);

}  // namespace rk
