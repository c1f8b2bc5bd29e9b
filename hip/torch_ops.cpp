// torch_ops.cpp — the torch binding of store_kv, copy_blocks and paged_decode: the only unit here
// that includes torch headers. It defines the op schemas (TORCH_LIBRARY(radixkv)), checks what the
// Python wrappers cannot be relied on to check (device, dtype, contiguity, alignment), turns
// tensors and layouts into the params structs (layout -> strides) and calls the launchers.
// Every op writes into tensors it is given and returns nothing, so no allocation happens here and
// the ops can be captured in CUDA graphs. Other binding units add ops with
// TORCH_LIBRARY_FRAGMENT(radixkv, m) (see README.md).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>

#include "copy_blocks.h"
#include "guard.h"
#include "kv_scales.h"
#include "paged_decode.h"
#include "store_kv.h"

namespace {

using at::Tensor;
using rk::binding::kv_code;

rk::DType dtype_code(const Tensor& t, const char* name) {
  if (t.scalar_type() == at::kHalf) return rk::DType::kF16;
  if (t.scalar_type() == at::kBFloat16) return rk::DType::kBF16;
  TORCH_CHECK_VALUE(false, "radixkv: unsupported ", name, " dtype: ", t.scalar_type(),
                    " (supported: float16, bfloat16)");
}

void check_gpu(const Tensor& t, const char* name, const Tensor& like) {
  TORCH_CHECK_VALUE(t.is_cuda(), "radixkv: ", name, " must be on a GPU, got ", t.device());
  TORCH_CHECK_VALUE(t.device() == like.device(), "radixkv: ", name, " is on ", t.device(),
                    " but the caches are on ", like.device());
}

void check_index(const Tensor& t, const char* name, const Tensor& like) {
  check_gpu(t, name, like);
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt, "radixkv: ", name, " must be int32, got ",
                    t.scalar_type());
  TORCH_CHECK_VALUE(t.stride(-1) == 1 || t.numel() <= 1, "radixkv: ", name,
                    " must be contiguous along its last axis");
}

void check_aligned(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "radixkv: ", name,
                    " must be 16-byte aligned");
  const int64_t per16 = 16 / static_cast<int64_t>(t.element_size());
  for (int i = 0; i < t.dim() - 1; ++i)
    TORCH_CHECK_VALUE(t.stride(i) % per16 == 0 || t.size(i) == 1, "radixkv: ", name, " stride ",
                      i, " = ", t.stride(i), " is not a multiple of ", per16,
                      " elements (16 bytes)");
  TORCH_CHECK_VALUE(t.stride(-1) == 1, "radixkv: ", name, " must have a contiguous last axis");
}

// Cache geometry from the layout code: (page_size, heads, slot stride, head stride).
struct CacheGeom {
  int64_t page_size, heads, head_dim, stride_slot, stride_head;
};

CacheGeom cache_geom(const Tensor& c, int64_t layout) {
  TORCH_CHECK_VALUE(c.dim() == 4, "radixkv: caches must be 4-D, got ", c.sizes());
  if (layout == 0) return {c.size(1), c.size(2), c.size(3), c.stride(1), c.stride(2)};
  TORCH_CHECK_VALUE(layout == 1, "radixkv: unsupported layout code: ", layout,
                    " (supported: 0 = bshd, 1 = bhsd)");
  return {c.size(2), c.size(1), c.size(3), c.stride(2), c.stride(1)};
}

void check_caches(const Tensor& k_cache, const Tensor& v_cache) {
  TORCH_CHECK_VALUE(k_cache.sizes() == v_cache.sizes() && k_cache.strides() == v_cache.strides() &&
                        k_cache.scalar_type() == v_cache.scalar_type(),
                    "radixkv: k_cache and v_cache must have the same shape, strides and dtype");
  check_gpu(k_cache, "k_cache", k_cache);
  check_gpu(v_cache, "v_cache", k_cache);
  check_aligned(k_cache, "k_cache");
  check_aligned(v_cache, "v_cache");
}

// The status word (guard.h): int32 [>= 2] on the caches' device, written by atomicOr.
uint32_t* status_ptr(const Tensor& status, const Tensor& like) {
  check_gpu(status, "status", like);
  TORCH_CHECK_VALUE(status.scalar_type() == at::kInt && status.is_contiguous() &&
                        status.numel() >= rk::guard::kStatusWords,
                    "radixkv: status must be a contiguous int32 tensor of >= 3 elements");
  return reinterpret_cast<uint32_t*>(status.data_ptr<int32_t>());
}

// Launchers throw rk::Unsupported / rk::LaunchError; surface them as ValueError / RuntimeError.
template <typename F>
void call(F&& f) {
  try {
    f();
  } catch (const rk::Unsupported& e) {
    TORCH_CHECK_VALUE(false, e.what());
  } catch (const rk::LaunchError& e) {
    TORCH_CHECK(false, e.what());
  }
}

void store_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
              const Tensor& slots, int64_t layout, Tensor status,
              const std::optional<Tensor>& k_scale, const std::optional<Tensor>& v_scale) {
  check_caches(k_cache, v_cache);
  const CacheGeom g = cache_geom(k_cache, layout);
  check_gpu(k, "k", k_cache);
  check_gpu(v, "v", k_cache);
  check_index(slots, "slots", k_cache);
  TORCH_CHECK_VALUE(k.dim() == 3 && k.sizes() == v.sizes() && k.size(1) == g.heads &&
                        k.size(2) == g.head_dim,
                    "radixkv: k, v must be [N, ", g.heads, ", ", g.head_dim, "], got ", k.sizes(),
                    " and ", v.sizes());
  const rk::KVType kv = kv_code(k_cache);
  TORCH_CHECK_VALUE(kv != rk::KVType::kSame || (k.scalar_type() == k_cache.scalar_type() &&
                                                v.scalar_type() == k_cache.scalar_type()),
                    "radixkv: k/v dtype must match the cache's ", k_cache.scalar_type());
  TORCH_CHECK_VALUE(k.scalar_type() == v.scalar_type(), "radixkv: k and v dtypes differ");
  TORCH_CHECK_VALUE(slots.dim() == 1 && slots.size(0) == k.size(0), "radixkv: slots must be [",
                    k.size(0), "], got ", slots.sizes());
  const rk::DType src = dtype_code(k, "k");
  const rk::KVScales scales = rk::binding::kv_scales(k_cache, g.heads, k_scale, v_scale, "radixkv: ");
  check_aligned(k, "k");
  check_aligned(v, "v");
  rk::StoreKVParams p{};
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.slots = slots.data_ptr<int32_t>();
  p.k_stride_n = k.stride(0);
  p.k_stride_h = k.stride(1);
  p.v_stride_n = v.stride(0);
  p.v_stride_h = v.stride(1);
  p.cache_stride_page = k_cache.stride(0);
  p.cache_stride_slot = g.stride_slot;
  p.cache_stride_head = g.stride_head;
  p.num_pages = k_cache.size(0);
  p.num_tokens = static_cast<int32_t>(k.size(0));
  p.num_heads = static_cast<int32_t>(g.heads);
  p.head_dim = static_cast<int32_t>(g.head_dim);
  p.page_size = static_cast<int32_t>(g.page_size);
  p.kv_type = kv;
  p.dtype = src;
  p.scales = scales;
  p.status = status_ptr(status, k_cache);
  const c10::cuda::CUDAGuard guard(k_cache.device());
  call([&] { rk::launch_store_kv(p, at::cuda::getCurrentCUDAStream().stream()); });
}

void copy_blocks(Tensor k_cache, Tensor v_cache, const Tensor& pairs, Tensor status) {
  TORCH_CHECK_VALUE(k_cache.sizes() == v_cache.sizes() &&
                        k_cache.scalar_type() == v_cache.scalar_type(),
                    "radixkv: k_cache and v_cache must have the same shape and dtype");
  check_gpu(k_cache, "k_cache", k_cache);
  check_gpu(v_cache, "v_cache", k_cache);
  check_index(pairs, "pairs", k_cache);
  TORCH_CHECK_VALUE(pairs.dim() == 2 && pairs.size(1) == 2 && pairs.is_contiguous(),
                    "radixkv: pairs must be contiguous int32 [n, 2], got ", pairs.sizes());
  TORCH_CHECK_VALUE(k_cache.dim() >= 1 && k_cache.is_contiguous() && v_cache.is_contiguous(),
                    "radixkv: copy_blocks needs contiguous caches");
  rk::CopyBlocksParams p{};
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.pairs = pairs.data_ptr<int32_t>();
  p.num_pages = k_cache.size(0);
  p.page_bytes = p.num_pages ? k_cache.nbytes() / p.num_pages : 0;
  p.num_pairs = static_cast<int32_t>(pairs.size(0));
  p.status = status_ptr(status, k_cache);
  const c10::cuda::CUDAGuard guard(k_cache.device());
  call([&] { rk::launch_copy_blocks(p, at::cuda::getCurrentCUDAStream().stream()); });
}

void paged_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                  const std::optional<Tensor>& kv_indptr, const Tensor& page_table,
                  const Tensor& kv_lens, Tensor out, Tensor workspace, Tensor counters, double sm_scale,
                  int64_t layout, const Tensor& plan, Tensor status, int64_t kernel,
                  const std::optional<Tensor>& k_scale, const std::optional<Tensor>& v_scale) {
  check_caches(k_cache, v_cache);
  const CacheGeom g = cache_geom(k_cache, layout);
  check_gpu(q, "q", k_cache);
  check_gpu(out, "out", k_cache);
  check_gpu(workspace, "workspace", k_cache);
  check_index(page_table, "page_table", k_cache);
  check_index(kv_lens, "kv_lens", k_cache);
  TORCH_CHECK_VALUE(q.dim() == 3 && q.size(2) == g.head_dim && q.is_contiguous(),
                    "radixkv: q must be contiguous [B, H_q, ", g.head_dim, "], got ", q.sizes());
  check_aligned(q, "q");
  TORCH_CHECK_VALUE(kv_code(k_cache) != rk::KVType::kSame || q.scalar_type() == k_cache.scalar_type(),
                    "radixkv: q dtype ", q.scalar_type(), " differs from the cache's ",
                    k_cache.scalar_type());
  TORCH_CHECK_VALUE(out.sizes() == q.sizes() && out.scalar_type() == q.scalar_type() &&
                        out.is_contiguous(),
                    "radixkv: out must be contiguous like q");
  const int64_t batch = q.size(0), h_q = q.size(1);
  TORCH_CHECK_VALUE(g.heads > 0 && h_q % g.heads == 0, "radixkv: H_q (", h_q,
                    ") must be a multiple of H_kv (", g.heads, ")");
  TORCH_CHECK_VALUE(kv_lens.dim() == 1 && kv_lens.size(0) == batch, "radixkv: kv_lens must be [",
                    batch, "]");
  // The work plan (paged_decode.h): units [capacity][4] then first_unit [B], 16-byte aligned.
  check_index(plan, "plan", k_cache);
  TORCH_CHECK_VALUE(plan.dim() == 1 && plan.numel() >= batch && (plan.numel() - batch) % 4 == 0 &&
                        (batch == 0 || plan.numel() > batch),
                    "radixkv: plan must be int32 [4 * capacity + B] with capacity >= 1, got ",
                    plan.numel(), " elements for B = ", batch);
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(plan.data_ptr()) % 16 == 0,
                    "radixkv: plan must start on a 16-byte boundary");
  const int64_t capacity = (plan.numel() - batch) / 4;
  TORCH_CHECK_VALUE(capacity <= INT32_MAX / 4, "radixkv: plan capacity ", capacity, " too large");
  // Partials of every unit row may be written (a bad plan must not write past the workspace).
  TORCH_CHECK_VALUE(workspace.scalar_type() == at::kFloat && workspace.is_contiguous() &&
                        workspace.numel() >= capacity * h_q * (g.head_dim + 2),
                    "radixkv: workspace must be contiguous float32 with >= plan capacity * H_q * "
                    "(D + 2) elements");
  // Merge counters: one per (request, KV head, 16-head chunk); they must be zero before the call
  // and every call leaves them zero (the last block of each group resets its own).
  check_gpu(counters, "counters", k_cache);
  const int64_t n_counters = batch * g.heads * ((h_q / g.heads + 15) / 16);
  TORCH_CHECK_VALUE(counters.scalar_type() == at::kInt && counters.is_contiguous() &&
                        counters.numel() >= n_counters,
                    "radixkv: counters must be contiguous int32 with >= B * H_kv * "
                    "ceil(H_q / H_kv / 16) elements (zero-filled)");
  rk::PagedDecodeParams p{};
  p.q = q.data_ptr();
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.out = out.data_ptr();
  if (kv_indptr.has_value()) {
    check_index(*kv_indptr, "kv_indptr", k_cache);
    TORCH_CHECK_VALUE(kv_indptr->dim() == 1 && kv_indptr->size(0) == batch + 1 &&
                          page_table.dim() == 1,
                      "radixkv: CSR mode needs kv_indptr [B + 1] and 1-D kv_indices");
    p.kv_indptr = kv_indptr->data_ptr<int32_t>();
    p.table_len = page_table.numel();
  } else {
    TORCH_CHECK_VALUE(page_table.dim() == 2 && page_table.size(0) == batch,
                      "radixkv: block_tables must be [B, max_blocks], got ", page_table.sizes());
    p.kv_indptr = nullptr;
    p.table_stride = page_table.stride(0);
    p.table_cols = static_cast<int32_t>(page_table.size(1));
  }
  p.page_table = page_table.data_ptr<int32_t>();
  p.kv_lens = kv_lens.data_ptr<int32_t>();
  p.workspace = workspace.data_ptr<float>();
  p.counters = counters.data_ptr<int32_t>();
  p.q_stride_b = q.stride(0);
  p.q_stride_h = q.stride(1);
  p.kv_stride_page = k_cache.stride(0);
  p.kv_stride_slot = g.stride_slot;
  p.kv_stride_head = g.stride_head;
  p.num_pages = static_cast<int32_t>(k_cache.size(0));
  p.batch = static_cast<int32_t>(batch);
  p.num_q_heads = static_cast<int32_t>(h_q);
  p.num_kv_heads = static_cast<int32_t>(g.heads);
  p.head_dim = static_cast<int32_t>(g.head_dim);
  p.page_size = static_cast<int32_t>(g.page_size);
  p.plan = plan.data_ptr<int32_t>();
  p.plan_capacity = static_cast<int32_t>(capacity);
  p.sm_scale = static_cast<float>(sm_scale);
  p.dtype = dtype_code(q, "q");
  p.kv_type = kv_code(k_cache);
  p.scales = rk::binding::kv_scales(k_cache, g.heads, k_scale, v_scale, "radixkv: ");
  TORCH_CHECK_VALUE(sm_scale > 0 && std::isfinite(sm_scale), "radixkv: sm_scale must be finite and > 0, got ",
                    sm_scale);
  TORCH_CHECK_VALUE(kernel >= 0 && kernel <= 2, "radixkv: unsupported kernel code: ", kernel,
                    " (supported: 0 = auto, 1 = matrix units, 2 = CUDA cores)");
  p.kernel = static_cast<int32_t>(kernel);
  p.status = status_ptr(status, k_cache);
  const c10::cuda::CUDAGuard guard(q.device());
  call([&] { rk::launch_paged_decode(p, at::cuda::getCurrentCUDAStream().stream()); });
}

}  // namespace

TORCH_LIBRARY(radixkv, m) {
  m.def("store_kv(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor k, Tensor v, Tensor slots, "
        "int layout, Tensor(c!) status, Tensor? k_scale=None, Tensor? v_scale=None) -> ()");
  m.def("copy_blocks(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor pairs, Tensor(c!) status) -> ()");
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? kv_indptr, "
        "Tensor page_table, Tensor kv_lens, Tensor(a!) out, Tensor(b!) workspace, "
        "Tensor(c!) counters, float sm_scale, int layout, Tensor plan, Tensor(d!) status, "
        "int kernel, Tensor? k_scale=None, Tensor? v_scale=None) -> ()");
}

TORCH_LIBRARY_IMPL(radixkv, CUDA, m) {
  m.impl("store_kv", &store_kv);
  m.impl("copy_blocks", &copy_blocks);
  m.impl("paged_decode", &paged_decode);
}
