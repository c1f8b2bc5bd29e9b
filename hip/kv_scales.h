// kv_scales.h — the cache element code and the FP8 scale checks every torch binding unit shares
// (torch_ops.cpp, extend_binding.cpp; header-only, torch headers, host code).
//
// FP8 caches take float32 k_scale / v_scale on the caches' device, shape [] or [H_kv], both the
// same shape; 16-bit caches take none. Values are not read here (no sync): the kernels turn a
// non-finite or non-positive scale into NaN output and record it in the status word (guard.h
// Extra), and the Python wrappers check values when they can read them on the host.
#pragma once

#include <torch/library.h>

#include <optional>

#include "common.h"

namespace rk {
namespace binding {

// The cache's element type relative to the 16-bit type of q / the new tokens.
inline KVType kv_code(const at::Tensor& cache) {
  if (cache.scalar_type() == at::kFloat8_e4m3fn) return KVType::kFp8E4M3;
  if (cache.scalar_type() == at::kFloat8_e5m2) return KVType::kFp8E5M2;
  return KVType::kSame;
}

// The scales of `cache` (`heads` KV heads), checked; `prefix` starts every message ("radixkv: ",
// "radixkv extend_attention: ").
inline KVScales kv_scales(const at::Tensor& cache, int64_t heads,
                          const std::optional<at::Tensor>& k_scale,
                          const std::optional<at::Tensor>& v_scale, const char* prefix) {
  KVScales s;
  if (kv_code(cache) == KVType::kSame) {
    TORCH_CHECK_VALUE(!k_scale.has_value() && !v_scale.has_value(), prefix,
                      "k_scale / v_scale apply to FP8 caches only, but the cache is ",
                      cache.scalar_type());
    return s;
  }
  TORCH_CHECK_VALUE(k_scale.has_value() && v_scale.has_value(), prefix, "an FP8 cache (",
                    cache.scalar_type(), ") needs k_scale= and v_scale=");
  for (const at::Tensor* t : {&*k_scale, &*v_scale}) {
    const char* name = t == &*k_scale ? "k_scale" : "v_scale";
    TORCH_CHECK_VALUE(t->is_cuda(), prefix, name, " must be on a GPU, got ", t->device());
    TORCH_CHECK_VALUE(t->device() == cache.device(), prefix, name, " is on ", t->device(),
                      " but the caches are on ", cache.device());
    TORCH_CHECK_VALUE(t->scalar_type() == at::kFloat, prefix, name, " must be float32, got ",
                      t->scalar_type());
    TORCH_CHECK_VALUE(t->dim() == 0 || (t->dim() == 1 && t->size(0) == heads && t->stride(0) == 1),
                      prefix, name, " must have shape [] or [", heads, "], got ", t->sizes());
  }
  TORCH_CHECK_VALUE(k_scale->dim() == v_scale->dim(), prefix, "k_scale and v_scale must have "
                    "the same shape, got ", k_scale->sizes(), " and ", v_scale->sizes());
  s.k = k_scale->data_ptr<float>();
  s.v = v_scale->data_ptr<float>();
  s.stride = k_scale->dim() == 0 ? 0 : 1;
  return s;
}

}  // namespace binding
}  // namespace rk
