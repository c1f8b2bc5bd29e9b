// hip/extend_hopper.cuh -- Hopper (sm_90) bulk copies and transaction barriers for the extend kernel.
//
// A bulk copy (cp.async.bulk, the TMA engine without a tensor map) moves one contiguous K or V
// row (head_dim * 2 bytes) from global to shared memory in a single instruction, and signals its
// bytes on an mbarrier in shared memory. The page walker issues one per key row, so the per-thread
// address arithmetic of 16-byte cp.async copies disappears from the loop. Plain sm_90 PTX (no
// sm_90a features). Only compiled where RADIXKV_EXT_HAS_BULK is 1.
#pragma once

#include "platform.h"

#if RK_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RADIXKV_EXT_HAS_BULK 1
#else
#define RADIXKV_EXT_HAS_BULK 0
#endif

namespace rk {
namespace hopper {

#if RADIXKV_EXT_HAS_BULK

RK_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Initialise a barrier that completes a phase after `count` arrivals and all expected bytes.
RK_DEVICE void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
// Make initialised barriers visible to the async (copy engine) proxy; follow with a CTA barrier.
RK_DEVICE void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// Arrive once on `bar`, announcing `bytes` more bytes that copies will deliver in this phase.
RK_DEVICE void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Block until the phase of `bar` with parity `parity` has completed.
RK_DEVICE void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared; the bytes are
// counted on `bar` when they land.
RK_DEVICE void bulk_copy(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Order this thread's earlier ordinary shared-memory accesses before later copy-engine writes.
RK_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#endif  // RADIXKV_EXT_HAS_BULK

}  // namespace hopper
}  // namespace rk
