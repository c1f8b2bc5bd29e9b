// copy_blocks.h — params and launcher of the copy-on-write page copy (torch-free, device-free).
#pragma once

#include "common.h"

namespace rk {

struct CopyBlocksParams {
  void* k_cache;         // [num_pages, ...]: page p is the page_bytes bytes at p * page_bytes
  void* v_cache;         // same shape as k_cache
  const int32_t* pairs;  // [num_pairs, 2] (src, dst) page numbers; out-of-range pairs are skipped
  int64_t page_bytes;    // bytes of one page of one cache
  int64_t num_pages;
  uint32_t* status;      // guard.h's status word: out-of-range pairs are recorded
  int32_t num_pairs;
};

// 16-byte accesses when page_bytes and both base pointers allow it, else 2-byte accesses.
// Destinations must be distinct and not sources. No sync, no allocation.
void launch_copy_blocks(const CopyBlocksParams& p, Stream stream);

}  // namespace rk
