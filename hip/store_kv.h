// store_kv.h — params and launcher of the KV write (torch-free, device-free).
#pragma once

#include "common.h"

namespace rk {

struct StoreKVParams {
  const void* k;        // [N, H_kv, D] 16-bit, rows at k_stride_n / k_stride_h, last axis contiguous
  const void* v;        // [N, H_kv, D] likewise
  void* k_cache;        // [num_pages, page_size, H_kv, D] (bshd) or [num_pages, H_kv, page_size, D] (bhsd)
  void* v_cache;        // same shape and strides as k_cache
  const int32_t* slots; // [N] slot of each token; < 0 or >= num_pages * page_size: token skipped
                        // (the second is a fault: guard.h)

  int64_t k_stride_n, k_stride_h, v_stride_n, v_stride_h;        // elements
  int64_t cache_stride_page, cache_stride_slot, cache_stride_head;  // elements (k and v caches)
  int64_t num_pages;
  uint32_t* status;     // guard.h's status word: slots >= num_pages * page_size are recorded
  int32_t num_tokens, num_heads, head_dim, page_size;

  // FP8 caches (kv_type != kSame): k / v are 16-bit floats of type `dtype`, quantised on the way
  // in as value / scale (round to nearest even, saturating); the cache strides count bytes.
  KVType kv_type = KVType::kSame;
  DType dtype = DType::kF16;
  KVScales scales;
};

// head_dim must be a multiple of 8 (16-byte rows) and every stride a multiple of 8 elements; the
// binding checks this. No sync, no allocation.
void launch_store_kv(const StoreKVParams& p, Stream stream);

}  // namespace rk
