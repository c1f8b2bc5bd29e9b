// paged_decode_kernel.cuh — paged decode on CUDA cores, and the kernel choice (run_any, at the
// end; included by paged_decode_d*.cu only). This kernel serves parts without matrix units
// (gfx906 class); NVIDIA and gfx90a run paged_decode_mma.cuh (`kernel="cuda_core"` runs this one
// anywhere, e.g. to test it on NVIDIA).
//
// Work split: one block of kThreads threads per (plan unit, KV head, query-head chunk); a unit is
// a KV range of one request (paged_decode.h). Lanes
// are grouped in row groups of kLanesPerRow lanes; a row group owns one K row and one V row at a
// time (each lane holds kElems consecutive elements = 1 or 2 16-byte loads), so a block has
// kRowGroups rows in flight per unroll slot and kStepTokens per step. Each row group keeps its own
// online-softmax state for the GC query heads it serves; at the end the row groups' states are
// merged through shared memory and written as the output (a request of one unit) or as the
// unit's normalised partial (a request of several; combine_kernel then merges them).
//
// GQA: the K/V rows of a KV head are loaded once and scored against all GC query heads, which sit
// in registers pre-multiplied by sm_scale * log2(e) (softmax in base 2). Groups larger than 8 are
// served by group/8 blocks per KV head (register budget), each reading the KV once.
#pragma once

#include <type_traits>

#include "dispatch.h"
#include "fp8_decode.h"
#include "guard.h"
#include "paged_decode.h"
#include "platform.h"
#include "softmax.h"
#include "paged_decode_mma.cuh"

namespace rk {
namespace decode {

constexpr int kThreads = 128;

// Elements per lane: 8 (one 16-byte copy per row), which keeps q and the accumulators small
// enough for four blocks per SM on NVIDIA.
constexpr int kElemsPerLane = 8;

// Pipeline depth: steps whose copies are in flight while one step is computed. Without an
// asynchronous copy (AMD/Hygon) the copy is synchronous and one stage is all that makes sense.
constexpr int kStages = kAsyncCopy ? 3 : 1;


template <int D, int GC>
struct Tile {
  static constexpr int kElems = kElemsPerLane;
  static constexpr int kVecs = kElems / 8;                  // 16-byte copies per row per lane
  static constexpr int kLanesPerRow = D / kElems;           // 8..32, divides the warp size
  static constexpr int kRowGroups = kThreads / kLanesPerRow;
  static constexpr int kUnroll = 32 / kElems;               // rows per row group per step
  static constexpr int kStepTokens = kRowGroups * kUnroll;
  static_assert(kLanesPerRow <= kWarpSize && kWarpSize % kLanesPerRow == 0, "row group in one warp");
  // Staging: per stage, per thread, U rows x (K, V) x V vectors; thread-major so that the 16-byte
  // accesses of neighbouring threads hit neighbouring banks.
  static constexpr int kStageVecs = kUnroll * 2 * kVecs * kThreads;
  static constexpr int kCombineFloats = kRowGroups * GC * D + 3 * kRowGroups * GC + 2 * GC;
  static constexpr int kSmemVecs = kStages * kStageVecs > (kCombineFloats + 3) / 4
                                       ? kStages * kStageVecs
                                       : (kCombineFloats + 3) / 4;
#if RK_AMD
  // hip-clang reads __launch_bounds__'s second argument as waves per SIMD (amdgpu-waves-per-eu),
  // not blocks per multiprocessor. The kernel needs 150-230 VGPRs at GC <= 2 (kMaxHeadChunk), so
  // one wave per SIMD is what fits without spilling on gfx906 (256 VGPRs); asking for more made
  // the compiler spill hundreds of VGPRs to scratch (hip/isa_report.py prints the counts).
  static constexpr int kMinBlocks = 1;
#else
  // Register cap from occupancy: 4 blocks (128 registers) while q + accumulators are small.
  static constexpr int kMinBlocks = GC * kElems <= 32 ? 4 : 2;
#endif
};

// One level of the reduce-scatter per instantiation, so that every array index is a
// compile-time constant (a loop whose trip count depends on the level left `val` in local memory).
template <int N, int LPR, int LVL, int LEVELS>
RK_DEVICE void scatter_levels(float (&val)[N], int lane) {
  if constexpr (LVL < LEVELS) {
    constexpr int mask = LPR >> (LVL + 1);
    constexpr int half = N >> (LVL + 1);
    const bool upper = (lane & mask) != 0;
#pragma unroll
    for (int k = 0; k < half; ++k) {
      // Select values, not addresses: a select between two array slots can also send the array
      // to local memory.
      const float lo = val[k], hi = val[k + half];
      const float send = upper ? lo : hi;
      const float keep = upper ? hi : lo;
      val[k] = keep + shfl_xor(send, mask);
    }
    scatter_levels<N, LPR, LVL + 1, LEVELS>(val, lane);
  }
}

template <typename T, int D, int PS, int GC, typename KV = T>
__global__ void __launch_bounds__(kThreads, (Tile<D, GC>::kMinBlocks))
    paged_decode_kernel(const PagedDecodeParams p) {
  using Tl = Tile<D, GC>;
  constexpr int E = Tl::kElems, V = Tl::kVecs, LPR = Tl::kLanesPerRow, RG = Tl::kRowGroups;
  constexpr int U = Tl::kUnroll, STEP = Tl::kStepTokens, S = kStages;
  __shared__ vec16 smem[Tl::kSmemVecs];

  const int unit = blockIdx.x;
  Unit job;
  RequestPages rq;
  guard::Faults faults;
  if (!unit_and_pages<PS>(p, unit, job, rq, faults)) return;  // an unused row (paged_decode_mma.cuh)
  const int b = job.b;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int chunks = group / GC;
  const int kvh = blockIdx.z / chunks;
  const int h0 = kvh * group + (blockIdx.z % chunks) * GC;  // first query head served here
  const int tid = threadIdx.x, rg = tid / LPR, lane = tid % LPR;

  const int32_t* pages = rq.pages;
  job = clamp_unit(job, rq.len, kMaxUnits, faults);
  const int begin = job.begin, end = job.end, units = job.count;  // this unit's tokens
  // No merge counter here (combine_kernel merges rows [first, first + units) of the plan), but a
  // group whose rows disagree is recorded as the matrix-unit kernel records it
  // (paged_decode_mma.cuh group_rows_agree).
  bool rows_agree = true;
  if (units > 1) rows_agree = group_rows_agree<kThreads>(p, unit, b, first_unit(p, b, units, faults), units, tid);
  const int nsteps = end > begin ? (end - begin + STEP - 1) / STEP : 0;

  bool bad_page = false;  // a row that exists has a page index outside the pool (guard.h)
  // Page of each row this thread copies in step i (-1: no row: past the end or a bad index).
  auto lookup = [&](int i, int (&pg)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = begin + i * STEP + u * RG + rg;  // row groups take neighbouring tokens
      int page = -1;
      if (i < nsteps && t < end) {
        page = pages[t / PS];
        if (!guard::page_ok(page, p.num_pages)) {
          bad_page = true;
          page = -1;
        }
      }
      pg[u] = page;
    }
  };
  const int64_t head_off = static_cast<int64_t>(kvh) * p.kv_stride_head + lane * E;
  const KV* kbase = static_cast<const KV*>(p.k_cache) + head_off;  // FP8: fp8_decode.h
  const KV* vbase = static_cast<const KV*>(p.v_cache) + head_off;
  auto stage_vec = [&](int st, int u, int kv, int v) -> vec16* {
    return &smem[(((st * U + u) * 2 + kv) * V + v) * kThreads + tid];
  };
  // Start the copies of step i into stage i % S; always commits one group (possibly empty).
  auto issue = [&](int i, const int (&pg)[U]) {
    if (i < nsteps) {
      const int st = i % S;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int t = begin + i * STEP + u * RG + rg;
        const bool ok = pg[u] >= 0;
        const int64_t off =
            ok ? static_cast<int64_t>(pg[u]) * p.kv_stride_page + (t % PS) * p.kv_stride_slot : 0;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          fp8::copy_row8<KV>(stage_vec(st, u, 0, v), kbase + off + 8 * v, ok);
          fp8::copy_row8<KV>(stage_vec(st, u, 1, v), vbase + off + 8 * v, ok);
        }
      }
    }
    cp_async_commit();
  };

  // Index look-ups run S + 1 steps ahead of the math and copies S - 1 steps ahead, so neither the
  // page-table loads nor the K/V loads wait in line behind the arithmetic.
  int pgq[S + 1][U];
#pragma unroll
  for (int j = 0; j <= S; ++j) lookup(j, pgq[j]);
#pragma unroll
  for (int j = 0; j < S - 1; ++j) issue(j, pgq[j]);

  // q of the GC served heads, this lane's E elements, in log2 units.
  const float qscale = p.sm_scale * kLog2e * fp8::k_factor<KV>(p, kvh, faults);
  float qv[GC][E];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    const T* qp = static_cast<const T*>(p.q) + b * p.q_stride_b + (h0 + g) * p.q_stride_h + lane * E;
#pragma unroll
    for (int v = 0; v < V; ++v) unpack8<T>(load16(qp + 8 * v), &qv[g][8 * v]);
#pragma unroll
    for (int i = 0; i < E; ++i) qv[g][i] *= qscale;
  }

  float m[GC], l[GC], acc[GC][E];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = kNegInf;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) acc[g][i] = 0.f;
  }

  for (int i = 0; i < nsteps; ++i) {
    issue(i + S - 1, pgq[S - 1]);
    cp_async_wait<S - 1>();  // this thread's copies of step i have landed
    const int st = i % S;
    // Partial dot products of this lane's 8 elements: s[g][u] for head g, row u.
    float s[GC][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[E];
#pragma unroll
      for (int v = 0; v < V; ++v) fp8::unpack_row8<T, KV>(*stage_vec(st, u, 0, v), &kf[8 * v]);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float a = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) a = fmaf(qv[g][e], kf[e], a);
        s[g][u] = a;
      }
    }
    bool ok[U];  // rows of this step that exist
#pragma unroll
    for (int u = 0; u < U; ++u) ok[u] = pgq[0][u] >= 0;
    float pw[GC][U];  // probability weights, every (head, row) in every lane
    float alpha[GC];  // rescale of each head's accumulator

    {
      // Reduce-scatter the N = GC*U partial scores over the LPR lanes of the row group: at each
      // level a lane keeps one half of its values and sends the other, so summing N values costs
      // N - 1 shuffles instead of N * log2(LPR), and the softmax below touches R values per lane,
      // not N. Afterwards lane j holds the full scores of flat indices n = (j / DUP) * R + k,
      // k < R, where n = g * U + u.
      constexpr int N = GC * U;
      constexpr int R = N >= LPR ? N / LPR : 1;
      constexpr int DUP = N >= LPR ? 1 : LPR / N;  // lanes holding the same values
      constexpr int LEVELS = (N >= LPR ? LPR : N) == 1 ? 0 : __builtin_ctz(N >= LPR ? LPR : N);
      static_assert(R <= U, "a lane's scores must belong to one head");
      float val[N];
#pragma unroll
      for (int g = 0; g < GC; ++g)
#pragma unroll
        for (int u = 0; u < U; ++u) val[g * U + u] = s[g][u];
      scatter_levels<N, LPR, 0, LEVELS>(val, lane);
#pragma unroll
      for (int mask = DUP / 2; mask > 0; mask /= 2) val[0] += shfl_xor(val[0], mask);

      // This lane's values all belong to head g_own; that head's values span LG aligned lanes.
      constexpr int LG = (U / R) * DUP;
      const int n0 = (lane / DUP) * R;
      const int g_own = n0 / U;
      float hmax = kNegInf;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int u = (n0 + k) % U;
        bool valid = ok[0];
#pragma unroll
        for (int uu = 1; uu < U; ++uu) valid = u == uu ? ok[uu] : valid;
        if (!valid) val[k] = kNegInf;
        hmax = fmaxf(hmax, val[k]);
      }
#pragma unroll
      for (int mask = LG / 2; mask > 0; mask /= 2) hmax = fmaxf(hmax, shfl_xor(hmax, mask));
      float ms_own = 0.f;
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float mx = fmaxf(m[g], shfl(hmax, g * LG, LPR));
        const float ms = safe_max(mx);
        alpha[g] = fast_exp2(m[g] - ms);
        m[g] = mx;
        ms_own = g == g_own ? ms : ms_own;
      }
      float hsum = 0.f;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        val[k] = fast_exp2(val[k] - ms_own);  // now the probability weight
        hsum += val[k];
      }
#pragma unroll
      for (int mask = LG / 2; mask > 0; mask /= 2) hsum += shfl_xor(hsum, mask);
      hsum *= 1.f / DUP;  // each value sat on DUP lanes of the group (exact: DUP is a power of 2)
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        l[g] = l[g] * alpha[g] + shfl(hsum, g * LG, LPR);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int n = g * U + u;
          pw[g][u] = shfl(val[n % R], (n / R) * DUP, LPR);
        }
      }
    }

    // Once the running max settles alpha is exactly 1: skip the rescale when the whole warp
    // agrees (a uniform branch), which is most steps.
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      if (warp_any(alpha[g] != 1.f)) {
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= alpha[g];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[E];
#pragma unroll
      for (int v = 0; v < V; ++v) fp8::unpack_row8<T, KV>(*stage_vec(st, u, 1, v), &vf[8 * v]);
#pragma unroll
      for (int g = 0; g < GC; ++g)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pw[g][u], vf[e], acc[g][e]);
    }
    // Advance the look-up queue; the new look-up is consumed S iterations from now.
#pragma unroll
    for (int j = 0; j < S; ++j)
#pragma unroll
      for (int u = 0; u < U; ++u) pgq[j][u] = pgq[j + 1][u];
    lookup(i + S + 1, pgq[S]);
  }
  cp_async_wait<0>();
  if (bad_page) faults.checks |= guard::kPageRange;
  // Read after the loop, not before: one register less across it.
  const float vfac = fp8::v_factor<KV>(p, kvh, faults);
  guard::report(p.status, guard::kPagedDecode, faults);
  guard::ran(p.status, guard::kRanCudaCore);
  // The staging buffer is reused below; the block's verdict on its merge group.
  if (__syncthreads_and(rows_agree) == 0 && tid == 0) guard::report_extra(p.status, guard::kDecodePlan);

// Merge the row groups' states.
  // Shared memory, now: o [RG][GC][D], then m, l, w [RG][GC], then L, M [GC].
  float(*sm_o)[GC][D] = reinterpret_cast<float(*)[GC][D]>(smem);
  float(*sm_m)[GC] = reinterpret_cast<float(*)[GC]>(&sm_o[RG][0][0]);
  float(*sm_l)[GC] = sm_m + RG;
  float(*sm_w)[GC] = sm_l + RG;
  float* sm_L = &sm_w[RG][0];
  float* sm_M = sm_L + GC;
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      sm_m[rg][g] = m[g];
      sm_l[rg][g] = l[g];
    }
  }
#pragma unroll
  for (int g = 0; g < GC; ++g)
#pragma unroll
    for (int i = 0; i < E; i += 4)
      *reinterpret_cast<float4*>(&sm_o[rg][g][lane * E + i]) =
          make_float4(acc[g][i], acc[g][i + 1], acc[g][i + 2], acc[g][i + 3]);
  __syncthreads();
  if (tid < GC) {
    float M = kNegInf;
    for (int r = 0; r < RG; ++r) M = fmaxf(M, sm_m[r][tid]);
    float L = 0.f;
    for (int r = 0; r < RG; ++r) {
      const float w = rescale(sm_m[r][tid], M);
      sm_w[r][tid] = w;
      L += sm_l[r][tid] * w;
    }
    sm_L[tid] = L;
    sm_M[tid] = M;
  }
  __syncthreads();

  const int64_t ws_rows = static_cast<int64_t>(p.plan_capacity) * p.num_q_heads;
  for (int idx = tid; idx < GC * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < RG; ++r) o = fmaf(sm_o[r][g][d], sm_w[r][g], o);
    o *= finalize_scale(sm_L[g]) * vfac;
    const int h = h0 + g;
    if (units == 1) {
      static_cast<T*>(p.out)[(static_cast<int64_t>(b) * p.num_q_heads + h) * D + d] =
          Convert<T>::from_float(o);
    } else {
      const int64_t row = static_cast<int64_t>(unit) * p.num_q_heads + h;
      p.workspace[row * D + d] = o;
      if (d == 0) {
        p.workspace[ws_rows * D + row] = sm_L[g] > 0.f ? sm_M[g] : kNegInf;
        p.workspace[ws_rows * (D + 1) + row] = sm_L[g];
      }
    }
  }
}

// Merge the units of one (request, query head) of several: thread d owns output element d. The
// units' (m, l) are staged in shared memory by all threads at once and turned into weights in
// parallel, and the partial outputs are loaded several at a time rather than in a serial chain.
template <typename T, int D>
__global__ void __launch_bounds__(D) combine_kernel(const PagedDecodeParams p) {
  __shared__ float s_m[kMaxUnits], s_w[kMaxUnits];
  const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  // Request b's units are the rows [first, first + S) (S: the first row's count), checked here
  // once; the decode kernel's blocks of b record a first row outside the plan or rows that
  // disagree. A first row of another request leaves nothing of b's to merge.
  const int first = p.plan[static_cast<int64_t>(p.plan_capacity) * 4 + b];
  if (first < 0 || first >= p.plan_capacity) return;
  const int4 row = reinterpret_cast<const int4*>(p.plan)[first];
  if (row.x != b) return;
  const int S = min(min(max(row.w, 1), kMaxUnits), p.plan_capacity - first);  // rows inside the workspace
  if (S == 1) return;  // written by the decode kernel
  const int64_t ws_rows = static_cast<int64_t>(p.plan_capacity) * p.num_q_heads;
  const float* ws_m = p.workspace + ws_rows * D;
  const float* ws_l = ws_m + ws_rows;
  const int64_t row0 = static_cast<int64_t>(first) * p.num_q_heads + h;  // partial rows of unit first + s
  const int64_t split_rows = p.num_q_heads;
  for (int s = d; s < S; s += D) {
    s_m[s] = ws_m[s * split_rows + row0];
    s_w[s] = ws_l[s * split_rows + row0];
  }
  __syncthreads();
  float M = kNegInf;
  for (int s = 0; s < S; ++s) M = fmaxf(M, s_m[s]);
  __syncthreads();
  for (int s = d; s < S; s += D) s_w[s] *= rescale(s_m[s], M);  // l_p * exp2(m_p - M)
  __syncthreads();
  float L = 0.f, o = 0.f;
  const float* part = p.workspace + row0 * D + d;
#pragma unroll 8
  for (int s = 0; s < S; ++s) {
    L += s_w[s];
    o = fmaf(s_w[s], part[s * split_rows * D], o);  // empty partitions hold o = 0, weight 0
  }
  static_cast<T*>(p.out)[(static_cast<int64_t>(b) * p.num_q_heads + h) * D + d] =
      Convert<T>::from_float(o * finalize_scale(L));
}

template <typename T, int D, int PS, int GC, typename KV = T>
void run(const PagedDecodeParams& p, Stream stream) {
  const stream_t s = static_cast<stream_t>(stream);
  const int chunks = (p.num_q_heads / p.num_kv_heads) / GC;
  const dim3 grid(p.plan_capacity, 1, p.num_kv_heads * chunks);
  paged_decode_kernel<T, D, PS, GC, KV><<<grid, kThreads, 0, s>>>(p);
  error_t e = last_error();
  // A plan of more rows than requests may cut some request in several units (with as many rows as
  // requests, each request has exactly one).
  if (e == kSuccess && p.plan_capacity > p.batch) {
    combine_kernel<T, D><<<dim3(p.batch, p.num_q_heads), D, 0, s>>>(p);
    e = last_error();
  }
  if (e != kSuccess) throw LaunchError(std::string("radixkv paged_decode launch: ") + error_string(e));
}

// The CUDA-core kernel for any GQA group: query heads in chunks of 8, 4, 2 or 1 on NVIDIA; of 2
// or 1 on AMD, where a chunk of 4 or 8 (q and the accumulators in registers: 16 per head) does not
// fit gfx906's 256 VGPRs without spilling to scratch. python/radixkv/ops/_api.py (_head_chunk)
// mirrors this choice. KV: the cache element (FP8: fp8_decode.h).
template <typename T, int D, int PS, typename KV = T>
void run_cuda_cores(const PagedDecodeParams& p, Stream stream) {
#if RK_AMD
  const int group = p.num_q_heads / p.num_kv_heads;
  if (group % 2 == 0) return run<T, D, PS, 2, KV>(p, stream);
  return run<T, D, PS, 1, KV>(p, stream);
#else
  RK_DISPATCH_HEAD_CHUNK(p.num_q_heads / p.num_kv_heads, GC, [&] { run<T, D, PS, GC, KV>(p, stream); });
#endif
}

#if RK_AMD
// One AMD binary holds code for several architectures, so the host asks the device whether it has
// matrix cores (gfx90a, gfx94x: MFMA); gfx906-class parts run the CUDA-core kernel.
inline bool device_has_mfma() {
  static int known[64] = {};  // per device: 0 not asked yet, 1 MFMA, 2 none
  const int dev = current_device();
  if (dev < 0 || dev >= 64) return false;
  if (known[dev] == 0) {
    hipDeviceProp_t prop;
    bool mfma = false;
    if (hipGetDeviceProperties(&prop, dev) == hipSuccess) {
      const std::string arch(prop.gcnArchName);
      mfma = arch.rfind("gfx90a", 0) == 0 || arch.rfind("gfx94", 0) == 0;
    }
    known[dev] = mfma ? 1 : 2;
  }
  return known[dev] == 1;
}
#endif

// Kernel choice: the matrix-unit kernel (paged_decode_mma.cuh, its shape picked by the grid size)
// on NVIDIA and on AMD parts with MFMA, the CUDA-core kernel above elsewhere. p.kernel
// (radixkv.ops.paged_decode's `kernel=`) overrides the default: 2 runs the CUDA-core kernel
// anywhere it is built (so NVIDIA executes the code gfx906 runs), 1 the matrix units.
template <typename T, int D, int PS, typename KV = T>
void run_any(const PagedDecodeParams& p, Stream stream) {
  if (p.kernel == 2) return run_cuda_cores<T, D, PS, KV>(p, stream);
#if RK_AMD
  if (p.kernel == 1 && !device_has_mfma())
    throw Unsupported("radixkv: unsupported kernel for paged_decode: this GPU has no matrix units "
                      "(supported: 'auto', 'cuda_core')");
  if (!device_has_mfma()) return run_cuda_cores<T, D, PS, KV>(p, stream);
#endif
  decode_mma::launch_auto<T, D, PS, KV>(p, stream);
}

}  // namespace decode
}  // namespace rk

// Body of launch_paged_decode_d<D>: dispatch dtype and page size for one head_dim.
#define RK_PAGED_DECODE_FOR_HEAD_DIM(DIM, p, stream)                                      \
  RK_DISPATCH_DTYPE((p).dtype, T, [&] {                                                   \
    RK_DISPATCH_KV((p).kv_type, T, KV, [&] {                                              \
      RK_DISPATCH_PAGE_SIZE((p).page_size, PS, [&] {                                      \
        ::rk::decode::run_any<T, DIM, PS, KV>((p), (stream));                             \
      });                                                                                 \
    });                                                                                   \
  })
