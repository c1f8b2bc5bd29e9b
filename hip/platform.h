// platform.h — everything that differs between AMD/Hygon (hipcc) and NVIDIA (nvcc), and nothing else.
//
// Kernels include this header and then use only the names below: the wavefront/warp size, lane
// shuffles, fast exp2, 16-byte vector loads, fp16/bf16 <-> float conversions, and the runtime API
// names (stream, error, launch check). Matrix-instruction wrappers (mma / MFMA / MMAC) are not here:
// they live in mma.h.
//
// Platform selection: clang in HIP mode (hipcc -x hip) defines __HIP__; nvcc defines __CUDACC__. A ROCm torch build
// compiles these sources with hipcc (RK_AMD); a CUDA torch build with nvcc (RK_NVIDIA).
#pragma once

#include <stdint.h>

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#define RK_AMD 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#elif defined(__CUDACC__)
#define RK_NVIDIA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#else
#error "platform.h: compile with hipcc (AMD/Hygon) or nvcc (NVIDIA)"
#endif

#define RK_DEVICE __device__ __forceinline__
#define RK_HOST_DEVICE __host__ __device__ __forceinline__

namespace rk {

// ---------------------------------------------------------------------------------------------
// Warp / wavefront size. gfx9 (GCN/CDNA: gfx906 = MI50/Hygon DCU Z100 class, gfx90a = MI200) runs
// 64-lane wavefronts; NVIDIA warps are 32 lanes. RDNA's wave32 mode is not a target. Host code sees
// the same constant, so launch shapes can be derived from it.
#if RK_AMD
constexpr int kWarpSize = 64;
#else
constexpr int kWarpSize = 32;
#endif

// ---------------------------------------------------------------------------------------------
// Runtime API names.
#if RK_AMD
using stream_t = hipStream_t;
using error_t = hipError_t;
inline error_t last_error() { return hipGetLastError(); }
inline const char* error_string(error_t e) { return hipGetErrorString(e); }
constexpr error_t kSuccess = hipSuccess;
#else
using stream_t = cudaStream_t;
using error_t = cudaError_t;
inline error_t last_error() { return cudaGetLastError(); }
inline const char* error_string(error_t e) { return cudaGetErrorString(e); }
constexpr error_t kSuccess = cudaSuccess;
#endif

// Host-side device queries and launch set-up. current_device(): -1 if it cannot be asked;
// multiprocessor_count(): 1 if it cannot be asked. allow_dynamic_smem: let `kernel` use `bytes` of
// dynamic shared memory beyond the default 48 KB (a function attribute, not a stream operation).
inline int current_device() {
  int dev = 0;
#if RK_AMD
  return hipGetDevice(&dev) == hipSuccess ? dev : -1;
#else
  return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
#endif
}
inline int multiprocessor_count(int dev) {
  int n = 0;
#if RK_AMD
  const bool ok = hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) == hipSuccess;
#else
  const bool ok = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
#endif
  return ok && n > 0 ? n : 1;
}
// Multiprocessors of the current device, cached per device (for launchers, called per launch).
inline int sm_count() {
  static int known[64] = {};
  const int dev = current_device();
  if (dev < 0 || dev >= 64) return 1;
  if (known[dev] == 0) known[dev] = multiprocessor_count(dev);
  return known[dev];
}
template <class Kernel>
inline void allow_dynamic_smem(Kernel kernel, int bytes) {
#if RK_AMD
  (void)hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                            hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
#else
  (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
#endif
}

// ---------------------------------------------------------------------------------------------
// Lane shuffles. `width` (a power of two <= kWarpSize) confines the exchange to aligned groups of
// that many lanes, as in a reduction over the lanes that share one K/V row.
template <typename T>
RK_DEVICE T shfl_xor(T v, int mask, int width = kWarpSize) {
#if RK_AMD
  return __shfl_xor(v, mask, width);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
#endif
}

template <typename T>
RK_DEVICE T shfl(T v, int src_lane, int width = kWarpSize) {
#if RK_AMD
  return __shfl(v, src_lane, width);
#else
  return __shfl_sync(0xffffffffu, v, src_lane, width);
#endif
}

// ---------------------------------------------------------------------------------------------
// Fast base-2 exponential (softmax runs in base 2: log2(e) is folded into the scale).
// exp2(-inf) = 0 on both platforms, which the empty softmax state relies on.
RK_DEVICE float fast_exp2(float x) {
#if RK_AMD
  return exp2f(x);  // lowers to v_exp_f32
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

RK_DEVICE float fast_max(float a, float b) { return fmaxf(a, b); }

// True if `pred` holds on any lane of the warp / wavefront (a uniform branch condition).
RK_DEVICE bool warp_any(bool pred) {
#if RK_AMD
  return __any(pred);
#else
  return __any_sync(0xffffffffu, pred);
#endif
}

// Bit i = pred of lane i (AMD: 64 lanes; NVIDIA: 32, zero-extended).
RK_DEVICE uint64_t warp_ballot(bool pred) {
#if RK_AMD
  return __ballot(pred);
#else
  return __ballot_sync(0xffffffffu, pred);
#endif
}

// Order shared-memory accesses among the lanes of one warp / wavefront (a barrier for one warp,
// for kernels whose warps run independent pipelines). AMD: a wavefront issues LDS accesses in
// order, so a fence that stops the compiler from moving them across is enough.
RK_DEVICE void warp_sync() {
#if RK_AMD
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// ---------------------------------------------------------------------------------------------
// 16-byte vector loads and stores. `load16_stream` is for data read exactly once (the KV stream):
// NVIDIA's evict-first cache hint; AMD's non-temporal load. Pointers must be 16-byte aligned.
struct alignas(16) vec16 {
  uint32_t w[4];
};

RK_DEVICE vec16 load16(const void* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  return vec16{{v.x, v.y, v.z, v.w}};
}

RK_DEVICE vec16 load16_stream(const void* p) {
#if RK_AMD
  const uint4* q = reinterpret_cast<const uint4*>(p);
  vec16 r;
  r.w[0] = __builtin_nontemporal_load(&q->x);
  r.w[1] = __builtin_nontemporal_load(&q->y);
  r.w[2] = __builtin_nontemporal_load(&q->z);
  r.w[3] = __builtin_nontemporal_load(&q->w);
  return r;
#else
  const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
  return vec16{{v.x, v.y, v.z, v.w}};
#endif
}

RK_DEVICE void store16(void* p, const vec16& v) {
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous 16-byte global -> shared copies, so loads can be in flight without holding
// registers. NVIDIA (sm_80+): cp.async (L2 only), completion per thread by commit groups, so a
// thread that reads back only what it copied needs no barrier. AMD/Hygon: no such instruction in
// HIP 5.2, so the copy is synchronous and commit/wait are no-ops (kAsyncCopy tells kernels to use
// a single stage there). `valid == false` writes 16 zero bytes and reads nothing.
#if RK_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr bool kAsyncCopy = true;
RK_DEVICE void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  // L2::128B: the row's neighbouring sectors (other lanes of the row group) come in one request.
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(n));
}
// 8 bytes (FP8 rows of the CUDA-core decode kernel): cp.async.ca, the only 8-byte form.
RK_DEVICE void cp_async8(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 8 : 0));
}
RK_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
RK_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#else
#if RK_NVIDIA
constexpr bool kAsyncCopy = false;  // host pass and pre-sm_80 device code
#else
constexpr bool kAsyncCopy = false;
#endif
RK_DEVICE void cp_async16(void* smem, const void* gmem, bool valid) {
  *reinterpret_cast<uint4*>(smem) =
      valid ? *reinterpret_cast<const uint4*>(gmem) : make_uint4(0u, 0u, 0u, 0u);
}
RK_DEVICE void cp_async8(void* smem, const void* gmem, bool valid) {
  *reinterpret_cast<uint2*>(smem) = valid ? *reinterpret_cast<const uint2*>(gmem) : make_uint2(0u, 0u);
}
RK_DEVICE void cp_async_commit() {}
template <int N>
RK_DEVICE void cp_async_wait() {}
#endif

// A hint to bring the 128-byte line at `p` into L2 (NVIDIA; nothing elsewhere): no register
// waits for it, so it may be issued before the loads it serves know their addresses.
RK_DEVICE void prefetch_l2(const void* p) {
#if RK_NVIDIA && defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#else
  (void)p;
#endif
}

// Loads of data other blocks of the same launch wrote (published by a merge ticket, below):
// bypass the non-coherent L1.
RK_DEVICE float load_coherent(const float* p) {
#if RK_NVIDIA
  return __ldcg(p);  // L2 only
#else
  return *static_cast<const volatile float*>(p);
#endif
}
RK_DEVICE float4 load_coherent4(const float* p) {
#if RK_NVIDIA
  return __ldcg(reinterpret_cast<const float4*>(p));  // L2 only
#else
  const volatile float* v = p;
  return make_float4(v[0], v[1], v[2], v[3]);
#endif
}

// Merge tickets (paged decode's split merge): the blocks of a group each take one, the last
// merges. One thread takes the block's ticket after a barrier; the writes the block made before
// that barrier must be visible to whoever takes a later ticket, and the writes before earlier
// tickets to this block after its next barrier. NVIDIA: the ticket is an acquire-release atomic
// (PTX release and acquire are cumulative, and a CTA barrier synchronises its threads), so no
// other thread fences. AMD: every thread fences on both sides (ticket_fence) of a relaxed atomic.
RK_DEVICE void ticket_fence() {
#if !RK_NVIDIA
  __threadfence();
#endif
}
RK_DEVICE int ticket_acq_rel(int* counter) {
#if RK_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
  return old;
#else
  return atomicAdd(counter, 1);
#endif
}

// Diagnostics (tuning builds' per-block time line): a device-wide clock in ns (it ticks in
// steps of ~0.26 us on an H200) and the multiprocessor id.
RK_DEVICE uint64_t global_timer_ns() {
#if RK_NVIDIA && defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return 0;  // AMD: the probes are NVIDIA tuning builds only
#endif
}
RK_DEVICE int sm_id() {
#if RK_NVIDIA && defined(__CUDA_ARCH__)
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
#else
  return 0;
#endif
}

// ---------------------------------------------------------------------------------------------
// 16-bit float storage types. bf16 is kept as raw 16-bit storage with bit-level conversions:
// HIP 5.2 has no __hip_bfloat16 device type, and a bf16 -> float conversion is only a shift.
struct bf16_t {
  uint16_t bits;
};
using f16_t = __half;

RK_DEVICE float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
RK_DEVICE float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// float -> bf16, round to nearest even; NaN stays NaN (quiet).
RK_DEVICE uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Conversions for one storage type T: unpack a 32-bit word holding two elements, and pack.
template <typename T>
struct Convert;

template <>
struct Convert<bf16_t> {
  RK_DEVICE static void unpack2(uint32_t w, float& lo, float& hi) {
    lo = bf16_lo(w);
    hi = bf16_hi(w);
  }
  RK_DEVICE static uint32_t pack2(float lo, float hi) {
    return static_cast<uint32_t>(float_to_bf16_bits(lo)) |
           (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
  }
  RK_DEVICE static float to_float(bf16_t x) { return __uint_as_float(uint32_t(x.bits) << 16); }
  RK_DEVICE static bf16_t from_float(float f) { return bf16_t{float_to_bf16_bits(f)}; }
};

template <>
struct Convert<f16_t> {
  RK_DEVICE static void unpack2(uint32_t w, float& lo, float& hi) {
    __half2 h;
    static_assert(sizeof(h) == 4, "__half2 is 4 bytes");
    __builtin_memcpy(&h, &w, 4);
    const float2 f = __half22float2(h);
    lo = f.x;
    hi = f.y;
  }
  RK_DEVICE static uint32_t pack2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t w;
    __builtin_memcpy(&w, &h, 4);
    return w;
  }
  RK_DEVICE static float to_float(f16_t x) { return __half2float(x); }
  RK_DEVICE static f16_t from_float(float f) { return __float2half_rn(f); }
};

// Unpack a 16-byte vector of eight 16-bit elements into floats.
template <typename T>
RK_DEVICE void unpack8(const vec16& v, float* out) {
#pragma unroll
  for (int i = 0; i < 4; ++i) Convert<T>::unpack2(v.w[i], out[2 * i], out[2 * i + 1]);
}


// ---------------------------------------------------------------------------------------------
// 8-bit float KV storage (OCP FP8: e4m3fn, bias 7, no inf, NaN = S.1111.111, max 448; e5m2,
// bias 15, IEEE-like, max 57344). Kept as raw bytes, like bf16: HIP 5.2 has no fp8 types. The
// cache holds stored values; stored x scale = real value, the scale applied in fp32 by the kernel.
struct fp8e4m3_t {
  uint8_t bits;
};
struct fp8e5m2_t {
  uint8_t bits;
};

template <typename KV>
struct IsFp8 {
  static constexpr bool value = false;
};
template <>
struct IsFp8<fp8e4m3_t> {
  static constexpr bool value = true;
};
template <>
struct IsFp8<fp8e5m2_t> {
  static constexpr bool value = true;
};

// fp8 -> fp16 by bit placement, four elements of a word at a time: bytes b0..b3 of `w` become
// the fp16 words lo = (b1:b0) and hi = (b3:b2). e5m2 is the top byte of an fp16, so the result
// is exact. e4m3's exponent and mantissa bits placed under fp16's (shifted right by one) give
// the value times 2^-8 exactly, subnormals included (e4m3 subnormals land on fp16 subnormals);
// Fp8Unit<KV> is the factor the kernels fold into their scales. The e4m3 NaN code reads as
// +-480 * 2^-8 (no NaN check on the hot path; store_kv never writes NaN for finite input).
template <typename KV>
struct Fp8Unit;
template <>
struct Fp8Unit<fp8e4m3_t> {
  static constexpr bool kShifted = true;  // the fp16 bits hold value x 2^-8
  static constexpr float value = 256.f;
};
template <>
struct Fp8Unit<fp8e5m2_t> {
  static constexpr bool kShifted = false;
  static constexpr float value = 1.f;
};

template <typename KV>
RK_DEVICE void fp8x4_to_f16x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  // Each byte to the top of its 16-bit half: (b1 << 24) | (b0 << 8), (b3 << 24) | (b2 << 8).
  const uint32_t a = ((w & 0xffu) << 8) | ((w & 0xff00u) << 16);
  const uint32_t b = ((w >> 8) & 0xff00u) | (w & 0xff000000u);
  if constexpr (!Fp8Unit<KV>::kShifted) {
    lo = a;
    hi = b;
  } else {
    // Sign stays at bit 15; the 7 exponent/mantissa bits move down by one.
    lo = (a & 0x80008000u) | ((a >> 1) & 0x3f803f80u);
    hi = (b & 0x80008000u) | ((b >> 1) & 0x3f803f80u);
  }
}

// 16 fp8 elements -> 16 fp16 elements in two 16-byte vectors (see fp8x4_to_f16x4).
template <typename KV>
RK_DEVICE void fp8x16_to_f16x16(const vec16& v, vec16& lo, vec16& hi) {
  fp8x4_to_f16x4<KV>(v.w[0], lo.w[0], lo.w[1]);
  fp8x4_to_f16x4<KV>(v.w[1], lo.w[2], lo.w[3]);
  fp8x4_to_f16x4<KV>(v.w[2], hi.w[0], hi.w[1]);
  fp8x4_to_f16x4<KV>(v.w[3], hi.w[2], hi.w[3]);
}

// 8 fp8 elements (two words) -> floats, times 1 / Fp8Unit<KV> like fp8x4_to_f16x4.
template <typename KV>
RK_DEVICE void unpack8_fp8(uint32_t w0, uint32_t w1, float* out) {
  uint32_t h[4];
  fp8x4_to_f16x4<KV>(w0, h[0], h[1]);
  fp8x4_to_f16x4<KV>(w1, h[2], h[3]);
#pragma unroll
  for (int i = 0; i < 4; ++i) Convert<f16_t>::unpack2(h[i], out[2 * i], out[2 * i + 1]);
}

// A usable dequantisation scale: finite and > 0 (NaN fails both comparisons).
RK_DEVICE bool fp8_scale_ok(float s) { return s > 0.f && s <= 3.402823466e38f; }
// A dequantisation scale as the kernels use it: itself when usable, else NaN (so a bad scale
// poisons what it touches instead of producing plausible values).
RK_DEVICE float fp8_checked_scale(float s) { return fp8_scale_ok(s) ? s : __uint_as_float(0x7fc00000u); }

// Correctly rounded a / b even under --use_fast_math (store_kv's quantisation must match the
// reference's IEEE division bit for bit).
RK_DEVICE float div_rn(float a, float b) {
#if RK_NVIDIA
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// float -> fp8 code, round to nearest even, saturating to the largest finite value (+-448 e4m3,
// +-57344 e5m2; infinities too); NaN -> a NaN code. Software on every target, so all agree.
template <typename KV>
RK_DEVICE uint8_t float_to_fp8(float f) {
  constexpr bool kE4 = Fp8Unit<KV>::kShifted;
  constexpr int kMan = kE4 ? 3 : 2, kBias = kE4 ? 7 : 15;
  constexpr float kMax = kE4 ? 448.f : 57344.f;
  constexpr uint32_t kMaxCode = kE4 ? 0x7eu : 0x7bu;
  constexpr float kMinNormal = kE4 ? 0x1p-6f : 0x1p-14f;
  constexpr float kSubScale = kE4 ? 0x1p9f : 0x1p16f;  // 1 / the smallest subnormal
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const float a = __uint_as_float(u & 0x7fffffffu);
  uint32_t code;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    code = 0x7fu;
  } else if (a >= kMax) {
    code = kMaxCode;
  } else if (a < kMinNormal) {
    // Multiples of the smallest subnormal; rounding up to 2^(mantissa bits) gives the smallest
    // normal's code, as it should.
    code = static_cast<uint32_t>(__float2int_rn(a * kSubScale));
  } else {
    uint32_t b = __float_as_uint(a);
    b += (1u << (22 - kMan)) - 1u + ((b >> (23 - kMan)) & 1u);  // round to nearest even
    const uint32_t e = (b >> 23) - 127u + kBias;
    code = (e << kMan) | ((b >> (23 - kMan)) & ((1u << kMan) - 1u));
    code = code > kMaxCode ? kMaxCode : code;
  }
  return static_cast<uint8_t>(code | sign);
}

}  // namespace rk
