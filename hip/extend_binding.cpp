// extend_binding.cpp — the torch binding of extend_attention (the only unit of this op that
// includes torch headers). Adds the op to the radixkv library defined in torch_ops.cpp, checks
// what the Python wrapper cannot be relied on to check (device, dtype, shapes, alignment), turns
// tensors and the layout code into ExtendParams and calls the launcher. Writes into `out`, returns
// nothing, allocates nothing and never synchronises, so it can be captured in a CUDA graph.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "extend_attention.h"
#include "kv_scales.h"

namespace {

using at::Tensor;

void check_on(const Tensor& t, const char* name, const Tensor& like) {
  TORCH_CHECK_VALUE(t.is_cuda(), "radixkv extend_attention: ", name, " must be on a GPU, got ",
                    t.device());
  TORCH_CHECK_VALUE(t.device() == like.device(), "radixkv extend_attention: ", name, " is on ",
                    t.device(), " but q is on ", like.device());
}

void check_int32(const Tensor& t, const char* name, int64_t dim, const Tensor& like) {
  check_on(t, name, like);
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt, "radixkv extend_attention: ", name,
                    " must be int32, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() == dim, "radixkv extend_attention: ", name, " must be ", dim,
                    "-D, got shape ", t.sizes());
  TORCH_CHECK_VALUE(t.numel() <= 1 || t.stride(-1) == 1, "radixkv extend_attention: ", name,
                    " must be contiguous along its last axis");
}

// 16-byte copies: base 16-byte aligned, every stride but the last a multiple of 16 bytes.
void check_vectorisable(const Tensor& t, const char* name) {
  const int64_t per16 = 16 / static_cast<int64_t>(t.element_size());
  TORCH_CHECK_VALUE(t.stride(-1) == 1, "radixkv extend_attention: ", name,
                    " must have a contiguous last (head_dim) axis, got strides ", t.strides());
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                    "radixkv extend_attention: ", name, " must be 16-byte aligned");
  for (int64_t i = 0; i + 1 < t.dim(); ++i)
    TORCH_CHECK_VALUE(t.stride(i) % per16 == 0 || t.size(i) == 1, "radixkv extend_attention: ", name,
                      " stride ", i, " = ", t.stride(i), " is not a multiple of ", per16, " elements");
}

// The cache's element type (FP8 or q's type) and its scales (kv_scales.h); a 16-bit cache must
// be q's type.
rk::KVType kv_type_and_scales(const Tensor& q, const Tensor& cache, int64_t h_kv,
                              const std::optional<Tensor>& k_scale,
                              const std::optional<Tensor>& v_scale, rk::KVScales& s) {
  const rk::KVType kv = rk::binding::kv_code(cache);
  TORCH_CHECK_VALUE(kv != rk::KVType::kSame || q.scalar_type() == cache.scalar_type(),
                    "radixkv extend_attention: q dtype ", q.scalar_type(), " differs from the "
                    "cache's ", cache.scalar_type(), " (caches: q's dtype, float8_e4m3fn or float8_e5m2)");
  s = rk::binding::kv_scales(cache, h_kv, k_scale, v_scale, "radixkv extend_attention: ");
  return kv;
}

void extend_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& qo_indptr, const std::optional<Tensor>& kv_indptr,
                      const Tensor& page_table, const Tensor& kv_lens, Tensor out, double sm_scale,
                      int64_t layout, int64_t max_q_len, Tensor status,
                      const std::optional<Tensor>& k_scale, const std::optional<Tensor>& v_scale,
                      int64_t max_kv_len, const std::optional<Tensor>& tile_plan, int64_t plan_rows) {
  TORCH_CHECK_VALUE(q.dim() == 3, "radixkv extend_attention: q must be [N_q, H_q, D], got ",
                    q.sizes());
  TORCH_CHECK_VALUE(k_cache.dim() == 4, "radixkv extend_attention: caches must be 4-D, got ",
                    k_cache.sizes());
  TORCH_CHECK_VALUE(k_cache.sizes() == v_cache.sizes() && k_cache.strides() == v_cache.strides() &&
                        k_cache.scalar_type() == v_cache.scalar_type(),
                    "radixkv extend_attention: k_cache and v_cache must have the same shape, "
                    "strides and dtype");
  TORCH_CHECK_VALUE(layout == 0 || layout == 1, "radixkv extend_attention: unsupported layout code ",
                    layout, " (supported: 0 = bshd, 1 = bhsd)");
  const bool bshd = layout == 0;
  const int64_t page_size = k_cache.size(bshd ? 1 : 2);
  const int64_t h_kv = k_cache.size(bshd ? 2 : 1);
  const int64_t dim = k_cache.size(3);
  const int64_t n_q = q.size(0), h_q = q.size(1);
  TORCH_CHECK_VALUE(q.size(2) == dim, "radixkv extend_attention: q head_dim ", q.size(2),
                    " differs from the cache's ", dim);
  TORCH_CHECK_VALUE(h_kv > 0 && h_q % h_kv == 0, "radixkv extend_attention: H_q (", h_q,
                    ") must be a multiple of H_kv (", h_kv, ")");
  TORCH_CHECK_VALUE(page_size >= 1, "radixkv extend_attention: page_size must be >= 1");
  rk::DType dtype;
  if (q.scalar_type() == at::kHalf) {
    dtype = rk::DType::kF16;
  } else if (q.scalar_type() == at::kBFloat16) {
    dtype = rk::DType::kBF16;
  } else {
    TORCH_CHECK_VALUE(false, "radixkv extend_attention: unsupported dtype ", q.scalar_type(),
                      " (supported: float16, bfloat16)");
  }
  TORCH_CHECK_VALUE(out.sizes() == q.sizes() && out.scalar_type() == q.scalar_type(),
                    "radixkv extend_attention: out must be ", q.sizes(), " ", q.scalar_type(),
                    ", got ", out.sizes(), " ", out.scalar_type());
  TORCH_CHECK_VALUE(max_kv_len >= 0, "radixkv extend_attention: max_kv_len must be >= 0 (0: unknown), got ",
                    max_kv_len);
  TORCH_CHECK_VALUE(sm_scale > 0 && std::isfinite(sm_scale),
                    "radixkv extend_attention: sm_scale must be finite and > 0, got ", sm_scale);
  check_on(status, "status", q);
  TORCH_CHECK_VALUE(status.scalar_type() == at::kInt && status.is_contiguous() && status.numel() >= 2,
                    "radixkv extend_attention: status must be a contiguous int32 tensor of >= 2 elements");
  rk::KVScales scales;
  const rk::KVType kv_type = kv_type_and_scales(q, k_cache, h_kv, k_scale, v_scale, scales);
  check_on(k_cache, "k_cache", q);
  check_on(v_cache, "v_cache", q);
  check_on(out, "out", q);
  check_vectorisable(q, "q");
  check_vectorisable(out, "out");
  check_vectorisable(k_cache, "k_cache");
  check_vectorisable(v_cache, "v_cache");
  check_int32(qo_indptr, "qo_indptr", 1, q);
  check_int32(kv_lens, "kv_lens", 1, q);
  const int64_t batch = qo_indptr.size(0) - 1;
  TORCH_CHECK_VALUE(batch >= 0 && kv_lens.size(0) == batch, "radixkv extend_attention: kv_lens has ",
                    kv_lens.size(0), " entries, qo_indptr ", qo_indptr.size(0), " (expected B, B + 1)");

  rk::ExtendParams p{};
  if (kv_indptr.has_value()) {
    check_int32(*kv_indptr, "kv_indptr", 1, q);
    check_int32(page_table, "kv_indices", 1, q);
    TORCH_CHECK_VALUE(kv_indptr->size(0) == batch + 1, "radixkv extend_attention: kv_indptr has ",
                      kv_indptr->size(0), " entries, expected B + 1 = ", batch + 1);
    p.kv_indptr = kv_indptr->data_ptr<int32_t>();
    p.table_len = page_table.numel();
  } else {
    check_int32(page_table, "block_tables", 2, q);
    TORCH_CHECK_VALUE(page_table.size(0) == batch, "radixkv extend_attention: block_tables has ",
                      page_table.size(0), " rows for a batch of ", batch);
    p.kv_indptr = nullptr;
    p.table_stride = page_table.stride(0);
    p.table_cols = static_cast<int32_t>(page_table.size(1));
  }
  if (tile_plan.has_value()) {
    check_int32(*tile_plan, "tile_plan", 2, q);
    TORCH_CHECK_VALUE(tile_plan->size(1) == 2 && tile_plan->is_contiguous() &&
                          reinterpret_cast<uintptr_t>(tile_plan->data_ptr()) % 8 == 0,
                      "radixkv extend_attention: tile_plan must be a contiguous, 8-byte aligned int32 "
                      "[n, 2] tensor of (request, rank) entries, got shape ", tile_plan->sizes());
    TORCH_CHECK_VALUE(plan_rows >= 1 && plan_rows <= (int64_t(1) << 30) &&
                          tile_plan->size(0) < (int64_t(1) << 31),
                      "radixkv extend_attention: plan_rows must be the plan's tile height (>= 1), got ",
                      plan_rows);
    if (tile_plan->size(0) > 0) {
      p.tile_plan = tile_plan->data_ptr<int32_t>();
      p.plan_len = static_cast<int32_t>(tile_plan->size(0));
      p.plan_rows = static_cast<int32_t>(plan_rows);
    }
  }
  TORCH_CHECK_VALUE(n_q < (int64_t(1) << 31) && k_cache.size(0) < (int64_t(1) << 31),
                    "radixkv extend_attention: more than 2^31 query tokens or pages");
  if (n_q == 0 || batch == 0) return;

  p.q = q.data_ptr();
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.out = out.data_ptr();
  p.qo_indptr = qo_indptr.data_ptr<int32_t>();
  p.page_table = page_table.data_ptr<int32_t>();
  p.kv_lens = kv_lens.data_ptr<int32_t>();
  p.q_stride_tok = q.stride(0);
  p.q_stride_head = q.stride(1);
  p.o_stride_tok = out.stride(0);
  p.o_stride_head = out.stride(1);
  p.kv_stride_page = k_cache.stride(0);
  p.kv_stride_slot = k_cache.stride(bshd ? 1 : 2);
  p.kv_stride_head = k_cache.stride(bshd ? 2 : 1);
  p.num_pages = static_cast<int32_t>(k_cache.size(0));
  p.batch = static_cast<int32_t>(batch);
  p.num_q_tokens = static_cast<int32_t>(n_q);
  p.num_q_heads = static_cast<int32_t>(h_q);
  p.num_kv_heads = static_cast<int32_t>(h_kv);
  p.head_dim = static_cast<int32_t>(dim);
  p.page_size = static_cast<int32_t>(page_size);
  p.max_q_len = static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(max_q_len, 0), n_q));
  p.max_kv_len = static_cast<int32_t>(std::min<int64_t>(max_kv_len, std::numeric_limits<int32_t>::max()));
  p.sm_scale = static_cast<float>(sm_scale);
  p.dtype = dtype;
  p.kv_type = kv_type;
  p.scales = scales;
  p.status = reinterpret_cast<uint32_t*>(status.data_ptr<int32_t>());
  const c10::cuda::CUDAGuard guard(q.device());
  try {
    rk::launch_extend_attention(p, at::cuda::getCurrentCUDAStream().stream());
  } catch (const rk::Unsupported& e) {
    TORCH_CHECK_VALUE(false, e.what());
  } catch (const rk::LaunchError& e) {
    TORCH_CHECK(false, e.what());
  }
}

int64_t extend_tile_rows(int64_t head_dim) {
  try {
    return rk::extend_tile_rows(static_cast<int>(head_dim));
  } catch (const rk::Unsupported& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(radixkv, m) {
  m.def("extend_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor qo_indptr, "
        "Tensor? kv_indptr, Tensor page_table, Tensor kv_lens, Tensor(a!) out, float sm_scale, "
        "int layout, int max_q_len, Tensor(b!) status, Tensor? k_scale=None, Tensor? v_scale=None, "
        "int max_kv_len=0, Tensor? tile_plan=None, int plan_rows=0) -> ()");
  m.def("extend_tile_rows(int head_dim) -> int", &extend_tile_rows);
}

TORCH_LIBRARY_IMPL(radixkv, CUDA, m) { m.impl("extend_attention", &extend_attention); }
