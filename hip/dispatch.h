// dispatch.h — turn runtime sizes into compile-time constants.
//
//   RK_DISPATCH_DTYPE(p.dtype, T, [&] { RK_DISPATCH_PAGE_SIZE(p.page_size, kPS, [&] {
//       run<T, kD, kPS>(p, stream); }); });
//
// Each macro switches over the values compiled into this build, binds the constant (a type for
// dtype) and calls the lambda; any other value ends in rk::throw_unsupported, naming the value and
// the supported set. A variant can be left out of a build with -DRADIXKV_HD_64=0 (etc.): the
// loader sets these from RADIXKV_HEAD_DIMS / RADIXKV_DTYPES / RADIXKV_PAGE_SIZES so a GPU run
// compiles only what it needs. These macros (and RADIXKV_KV_* below) scope the build, they do not
// tune it: each only removes instantiations (a call needing one raises), none changes a kernel.
#pragma once

#include "common.h"

#ifndef RADIXKV_HD_64
#define RADIXKV_HD_64 1
#endif
#ifndef RADIXKV_HD_128
#define RADIXKV_HD_128 1
#endif
#ifndef RADIXKV_HD_256
#define RADIXKV_HD_256 1
#endif
#ifndef RADIXKV_DT_FP16
#define RADIXKV_DT_FP16 1
#endif
#ifndef RADIXKV_DT_BF16
#define RADIXKV_DT_BF16 1
#endif
#ifndef RADIXKV_PS_1
#define RADIXKV_PS_1 1
#endif
#ifndef RADIXKV_PS_16
#define RADIXKV_PS_16 1
#endif
#ifndef RADIXKV_PS_64
#define RADIXKV_PS_64 1
#endif

// --- one `case` per compiled value (empty when switched off) ---------------------------------
#define RK_CASE_INT(V, C, ...)  \
  case V: {                     \
    constexpr int C = V;        \
    __VA_ARGS__();              \
    return;                     \
  }

#if RADIXKV_HD_64
#define RK_HD_CASE_64(C, ...) RK_CASE_INT(64, C, __VA_ARGS__)
#else
#define RK_HD_CASE_64(C, ...)
#endif
#if RADIXKV_HD_128
#define RK_HD_CASE_128(C, ...) RK_CASE_INT(128, C, __VA_ARGS__)
#else
#define RK_HD_CASE_128(C, ...)
#endif
#if RADIXKV_HD_256
#define RK_HD_CASE_256(C, ...) RK_CASE_INT(256, C, __VA_ARGS__)
#else
#define RK_HD_CASE_256(C, ...)
#endif

#if RADIXKV_PS_1
#define RK_PS_CASE_1(C, ...) RK_CASE_INT(1, C, __VA_ARGS__)
#else
#define RK_PS_CASE_1(C, ...)
#endif
#if RADIXKV_PS_16
#define RK_PS_CASE_16(C, ...) RK_CASE_INT(16, C, __VA_ARGS__)
#else
#define RK_PS_CASE_16(C, ...)
#endif
#if RADIXKV_PS_64
#define RK_PS_CASE_64(C, ...) RK_CASE_INT(64, C, __VA_ARGS__)
#else
#define RK_PS_CASE_64(C, ...)
#endif

#if RADIXKV_DT_FP16
#define RK_DT_CASE_FP16(T, ...)     \
  case ::rk::DType::kF16: {         \
    using T = ::rk::f16_t;          \
    __VA_ARGS__();                  \
    return;                         \
  }
#else
#define RK_DT_CASE_FP16(T, ...)
#endif
#if RADIXKV_DT_BF16
#define RK_DT_CASE_BF16(T, ...)     \
  case ::rk::DType::kBF16: {        \
    using T = ::rk::bf16_t;         \
    __VA_ARGS__();                  \
    return;                         \
  }
#else
#define RK_DT_CASE_BF16(T, ...)
#endif

// Strings naming what this build supports (for the error message).
#define RK_STR_IF(on, s) ((on) ? s : "")
namespace rk {
inline std::string built_list(std::initializer_list<std::pair<bool, const char*>> xs) {
  std::string out;
  for (const auto& x : xs)
    if (x.first) out += (out.empty() ? "" : ", ") + std::string(x.second);
  return out.empty() ? "none" : out;
}
}  // namespace rk

#define RK_DISPATCH_HEAD_DIM(value, C, ...)                                                 \
  [&] {                                                                                     \
    switch (static_cast<int>(value)) {                                                      \
      RK_HD_CASE_64(C, __VA_ARGS__)                                                         \
      RK_HD_CASE_128(C, __VA_ARGS__)                                                        \
      RK_HD_CASE_256(C, __VA_ARGS__)                                                        \
      default: break;                                                                       \
    }                                                                                       \
    ::rk::throw_unsupported("head_dim", (value),                                            \
        ::rk::built_list({{RADIXKV_HD_64, "64"}, {RADIXKV_HD_128, "128"},                   \
                          {RADIXKV_HD_256, "256"}}).c_str());                               \
  }()

#define RK_DISPATCH_PAGE_SIZE(value, C, ...)                                                \
  [&] {                                                                                     \
    switch (static_cast<int>(value)) {                                                      \
      RK_PS_CASE_1(C, __VA_ARGS__)                                                          \
      RK_PS_CASE_16(C, __VA_ARGS__)                                                         \
      RK_PS_CASE_64(C, __VA_ARGS__)                                                         \
      default: break;                                                                       \
    }                                                                                       \
    ::rk::throw_unsupported("page_size", (value),                                           \
        ::rk::built_list({{RADIXKV_PS_1, "1"}, {RADIXKV_PS_16, "16"},                       \
                          {RADIXKV_PS_64, "64"}}).c_str());                                 \
  }()

#define RK_DISPATCH_DTYPE(value, T, ...)                                                    \
  [&] {                                                                                     \
    switch (value) {                                                                        \
      RK_DT_CASE_FP16(T, __VA_ARGS__)                                                       \
      RK_DT_CASE_BF16(T, __VA_ARGS__)                                                       \
      default: break;                                                                       \
    }                                                                                       \
    ::rk::throw_unsupported("dtype code", static_cast<int>(value),                          \
        ::rk::built_list({{RADIXKV_DT_FP16, "float16 (0)"},                                 \
                          {RADIXKV_DT_BF16, "bfloat16 (1)"}}).c_str());                     \
  }()

// Query heads served by one block of the CUDA-core decode kernel (paged_decode_kernel.cuh): the
// largest of 8, 4, 2, 1 dividing the GQA group (register budget: q and the accumulators of every
// served head live in registers). The matrix-unit kernel serves chunks of 16 heads instead.
#define RK_DISPATCH_HEAD_CHUNK(group, C, ...)                                               \
  [&] {                                                                                     \
    const int g_ = static_cast<int>(group);                                                 \
    if (g_ % 8 == 0) { constexpr int C = 8; __VA_ARGS__(); return; }                        \
    if (g_ % 4 == 0) { constexpr int C = 4; __VA_ARGS__(); return; }                        \
    if (g_ % 2 == 0) { constexpr int C = 2; __VA_ARGS__(); return; }                        \
    if (g_ >= 1) { constexpr int C = 1; __VA_ARGS__(); return; }                            \
    ::rk::throw_unsupported("GQA group (H_q / H_kv)", g_, ">= 1");                          \
  }()

// KV cache element type: KV = T (the 16-bit type of q) or an 8-bit float type. FP8 variants are
// compiled out with -DRADIXKV_KV_E4M3=0 / -DRADIXKV_KV_E5M2=0 (loader: RADIXKV_KV_DTYPES).
#ifndef RADIXKV_KV_E4M3
#define RADIXKV_KV_E4M3 1
#endif
#ifndef RADIXKV_KV_E5M2
#define RADIXKV_KV_E5M2 1
#endif
#if RADIXKV_KV_E4M3
#define RK_KV_CASE_E4M3(KV, ...)        \
  case ::rk::KVType::kFp8E4M3: {        \
    using KV = ::rk::fp8e4m3_t;         \
    __VA_ARGS__();                      \
    return;                             \
  }
#else
#define RK_KV_CASE_E4M3(KV, ...)
#endif
#if RADIXKV_KV_E5M2
#define RK_KV_CASE_E5M2(KV, ...)        \
  case ::rk::KVType::kFp8E5M2: {        \
    using KV = ::rk::fp8e5m2_t;         \
    __VA_ARGS__();                      \
    return;                             \
  }
#else
#define RK_KV_CASE_E5M2(KV, ...)
#endif
#define RK_DISPATCH_KV(value, T, KV, ...)                                                   \
  [&] {                                                                                     \
    switch (value) {                                                                        \
      case ::rk::KVType::kSame: {                                                           \
        using KV = T;                                                                       \
        __VA_ARGS__();                                                                      \
        return;                                                                             \
      }                                                                                     \
      RK_KV_CASE_E4M3(KV, __VA_ARGS__)                                                      \
      RK_KV_CASE_E5M2(KV, __VA_ARGS__)                                                      \
      default: break;                                                                       \
    }                                                                                       \
    ::rk::throw_unsupported("KV cache dtype code", static_cast<int>(value),                 \
        ::rk::built_list({{true, "same as q (0)"}, {RADIXKV_KV_E4M3, "float8_e4m3fn (1)"},  \
                          {RADIXKV_KV_E5M2, "float8_e5m2 (2)"}}).c_str());                  \
  }()
