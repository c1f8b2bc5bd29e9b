// paged_decode_mma.cuh — paged decode on the matrix units (NVIDIA mma.sync, AMD gfx90a MFMA),
// included by paged_decode_d*.cu. Parts without matrix units (gfx906 class) run the CUDA-core
// kernel of paged_decode_kernel.cuh instead (the choice: run_any there).
//
// Work split: one block per (plan unit, KV head, chunk of 16 query heads); a unit is a KV range of
// one request (paged_decode.h, radixkv-core's metadata/plan.rs). The 16 rows of the
// MMA A operand are the query heads of the GQA group that read this KV head (a group < 16 is
// padded with zero rows, a group of 16 is one pass over the KV, larger groups take several
// chunks). Scores S(16 heads x 16 keys) = Q K^T and O(16 x D) += P V run on the matrix units, the
// online softmax runs per head row on the accumulators (mma.h's acc_query / row_max). On NVIDIA a
// group of at most 8 heads runs transposed instead (kNarrow: keys or dims as the MMA rows, the
// heads as its 8 columns), which leaves no padding rows.
//
// Pipeline: each warp owns every W-th key tile of the block's partition and its own S
// shared-memory stages, filled by 16-byte asynchronous copies (cp.async, L2::128B) and completed
// per warp (cp.async.wait_group + __syncwarp): no block barrier inside the loop, so warps never
// wait for each other and the copies of S tiles per warp stay in flight. Page-table entries
// are read kLookAhead tiles before their copies are issued, one entry per lane ("key lane"), and
// handed to the copying lanes with shuffles. At the end the warps' (m, l, O) are merged through
// shared memory. A request of several units has each block store its unit's normalised partial;
// the last block of a (request, KV head, chunk) to finish, found with an atomic counter that it
// resets to zero afterwards, merges the partials: no second kernel, no host sync, CUDA-graph safe.
#pragma once

#include <type_traits>

#include "dispatch.h"
#include "fp8_decode.h"
#include "guard.h"
#include "mma.h"
#include "paged_decode.h"
#include "platform.h"
#include "softmax.h"

namespace rk {

// Where one request's pages are, for both decode kernels: its CSR slice (kv_indptr, clamped to
// kv_indices) or its block-table row, and `len`, its kv_lens clamped to what those pages hold
// (tokens beyond are never read). Bad metadata is added to `f` (reported at the kernel's end).
struct RequestPages {
  const int32_t* pages;
  int len;
};
template <int PS>
RK_DEVICE RequestPages request_pages(const PagedDecodeParams& p, int b, guard::Faults& f) {
  RequestPages r;
  int npages;
  const int raw_len = p.kv_lens[b];  // read beside kv_indptr, not after its branches
  if (p.kv_indptr != nullptr) {
    const guard::Row row = guard::csr_row(p.kv_indptr, b, p.table_len, f.checks);
    r.pages = p.page_table + row.begin;
    npages = row.count;
  } else {
    r.pages = p.page_table + static_cast<int64_t>(b) * p.table_stride;
    npages = p.table_cols;
  }
  r.len = guard::clamp_len(raw_len, npages, PS, f.checks);
  return r;
}

// Unit u of the plan, its range clamped to the request's `len` tokens and its unit count to
// [1, max_units]. `b` < 0: an unused row (nothing to do). A row naming no request of the batch, a
// range that is not a range, or a count outside [1, max_units] is added to `f` (kDecodePlan); a
// range ending past `len` is not (a kv_lens clamp, recorded as such, shortens the request).
struct Unit {
  int b, begin, end, count;
};
RK_DEVICE Unit plan_row(const PagedDecodeParams& p, int u) {
  const int4 r = reinterpret_cast<const int4*>(p.plan)[u];
  return Unit{r.x, r.y, r.z, r.w};
}
RK_DEVICE bool plan_row_ok(const PagedDecodeParams& p, const Unit& w, guard::Faults& f) {
  if (w.b >= 0 && w.b < p.batch) return true;
  if (w.b != -1) f.extra |= guard::kDecodePlan;
  return false;
}
RK_DEVICE Unit clamp_unit(Unit w, int len, int max_units, guard::Faults& f) {
  const bool bad = w.begin < 0 || w.end < w.begin || w.count < 1 || w.count > max_units;
  if (bad) f.extra |= guard::kDecodePlan;
  w.begin = min(max(w.begin, 0), len);
  w.end = min(max(w.end, w.begin), len);
  w.count = min(max(w.count, 1), max_units);
  return w;
}
// Unit `unit`'s plan row and its request's pages. Plans list units in request order, so in a plan
// of one unit per request, and in every plan of one request, unit u belongs to request
// min(u, batch - 1): that request's metadata is loaded beside the row instead of after it, and
// loaded again for the row's own request only when the guess was wrong. False: an unused row
// (a bad one is reported here, since the block leaves).
template <int PS>
RK_DEVICE bool unit_and_pages(const PagedDecodeParams& p, int unit, Unit& job, RequestPages& rq,
                              guard::Faults& f) {
  job = plan_row(p, unit);
  const int guess = min(unit, p.batch - 1);
  guard::Faults fg;
  if (guess >= 0) rq = request_pages<PS>(p, guess, fg);
  if (!plan_row_ok(p, job, f)) {
    if (threadIdx.x == 0) guard::report(p.status, guard::kPagedDecode, f);
    return false;
  }
  if (job.b != guess) rq = request_pages<PS>(p, job.b, f);
  else f.checks |= fg.checks;
  return true;
}
// The row of request b's first unit, clamped so its `count` units lie inside the plan.
RK_DEVICE int first_unit(const PagedDecodeParams& p, int b, int count, guard::Faults& faults) {
  const int f = p.plan[static_cast<int64_t>(p.plan_capacity) * 4 + b];
  const int hi = p.plan_capacity - count;
  if (f < 0 || f > hi) faults.extra |= guard::kDecodePlan;
  return min(max(f, 0), max(hi, 0));
}
// A request of several units is merged only when its plan rows agree: rows [first, first +
// units) all name request b with `units` units (counts clamped as clamp_unit does), this block's
// row `unit` among them. Every block of such a group reads the same rows and agrees, so exactly
// `units` blocks arrive at the group's merge counter and the last resets it, whatever else the
// plan holds; a block whose group disagrees neither counts nor merges (a plan fault). This is
// one thread's share (rows first + tid, first + tid + kThreads, ...): the block's verdict is the
// AND over its threads, taken at a barrier after the KV loop, so the loads wait for nothing.
template <int kThreads>
RK_DEVICE bool group_rows_agree(const PagedDecodeParams& p, int unit, int b, int first, int units, int tid) {
  bool ok = unit >= first && unit - first < units && first <= p.plan_capacity - units;
#pragma unroll
  for (int k = 0; k < (kMaxUnits + kThreads - 1) / kThreads; ++k) {
    const int t = tid + k * kThreads;
    if (t < units && first + t < p.plan_capacity) {
      const int64_t r = static_cast<int64_t>(first + t) * 4;
      const int rb = p.plan[r], rc = p.plan[r + 3];
      ok &= (rb == b) & (min(max(rc, 1), kMaxUnits) == units);
    }
  }
  return ok;
}

namespace decode_mma {

using mma::Acc;
using mma::Frag;

constexpr int kRows = 16;        // query heads per block: the M of the MMA blocks
// Tiles between a page-table read and the copies that use it. Equal to the stage count: the
// prologue reads the entries of the first S tiles in one round trip, and every later read is
// issued S tiles before its copies.
template <int S>
constexpr int kLookAhead = S;
// Page-table slot of a key past the partition (never copied; not a fault, unlike a bad entry).
constexpr int kNoKey = -0x7fffffff - 1;

// Blocks per (unit, KV head): the GQA group in chunks of kRows query heads.
RK_HOST_DEVICE int head_chunks(const PagedDecodeParams& p) {
  return (p.num_q_heads / p.num_kv_heads + kRows - 1) / kRows;
}

// One configuration: D head_dim, W warps per block, KEYS keys per tile (per stage), S stages,
// KVB bytes per cache element (2, or 1 for FP8 caches: fp8_decode.h), DIRECT: FP8 copied as
// per-lane fragments (fp8_decode.h, "Direct fragments"; NVIDIA narrow form only).
template <int D_, int W_, int KEYS_, int S_, int KVB_ = 2, bool DIRECT_ = false>
struct Shape {
  static constexpr int D = D_, W = W_, KEYS = KEYS_, S = S_, KVB = KVB_;
  static constexpr bool kDirect = DIRECT_;
  static constexpr int kThreads = W * kWarpSize;
  static constexpr int kChunks = D / 8;                    // 16-byte chunks per 16-bit row (q, tiles)
  static constexpr int kCopyChunks = D * KVB / 16;         // 16-byte chunks per cache row
  static constexpr int kRowsPerCopy = kWarpSize / kCopyChunks;  // rows one warp-wide copy covers
  static constexpr int kCopies = KEYS / kRowsPerCopy;       // per lane per tile, for K (and V)
  static constexpr int kKB = KEYS / 16, kDB = D / 16;
  static constexpr int kIdx = (KEYS + kWarpSize - 1) / kWarpSize;  // page entries per key lane
  static constexpr int kTileElems = KEYS * D;
  // One warp's K and V stages; FP8: its S byte stages of K and of V plus one 16-bit tile that K,
  // then V, are converted into (fp8_decode.h); direct FP8: the byte stages only.
  static constexpr int kWarpElems =
      KVB == 2 ? 2 * S * kTileElems : DIRECT_ ? S * kTileElems : (S + 1) * kTileElems;
  static constexpr bool kQRegs = D <= 128;  // Q fragments live in registers (D = 256: reloaded)
  static constexpr int kOStride = D + 8;    // merge rows in floats (+8: no bank conflicts)
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kPipeBytes = W * kWarpElems * 2;
  static constexpr int kMergeBytes = (W * kRows * kOStride + 4 * W * kRows + 2 * kRows) * 4;
  static constexpr int kCombineBytes = 2 * kMaxUnits * kRows * 4;  // the combine's m (then weight), l
  static constexpr int kWorkBytes = kPipeBytes > kMergeBytes
                                        ? (kPipeBytes > kCombineBytes ? kPipeBytes : kCombineBytes)
                                        : (kMergeBytes > kCombineBytes ? kMergeBytes : kCombineBytes);
  static constexpr int kSmemBytes = kQBytes + kWorkBytes;
  static_assert(kWarpSize % kCopyChunks == 0 && KEYS % kRowsPerCopy == 0, "copy lanes");
  static_assert(KEYS % 16 == 0 && KEYS <= 64 && (KEYS & (KEYS - 1)) == 0, "tile keys");
  static_assert(KVB == 1 || kRowsPerCopy <= 8, "one copy's rows share a swizzle period");
  static_assert(!DIRECT_ || KVB == 1, "direct fragments are an FP8 path");
};

// The shapes, frozen per architecture. NVIDIA: 16 KB of K+V per tile, 3 stages, 4 warps: 192 KB
// of copies in flight per SM (one block per SM) for grids of up to one block per SM (small
// batches, requests cut in units); larger grids take 8 KB tiles (16 keys at D = 128), 96 KB per
// block, two blocks per SM, so one block's prologue and merge overlap the other's copies and the
// last wave is finer. AMD: copies are synchronous (one stage) and gfx90a has 64 KB of LDS.
#if RK_NVIDIA
template <int D>
using DefaultShape = Shape<D, 4, (D == 64 ? 64 : D == 128 ? 32 : 16), 3>;
template <int D>
using WideShape = Shape<D, 4, (D == 64 ? 32 : 16), 3>;
#else
template <int D>
using DefaultShape = Shape<D, 2, (D == 64 ? 64 : D == 128 ? 32 : 16), 1>;
template <int D>
using WideShape = DefaultShape<D>;
#endif

// FP8 caches: the same tiles in keys, so a stage holds half the bytes; more stages keep the bytes
// in flight per warp what the 16-bit shapes have (NVIDIA: 4 of 5 stages of 8 KB at D = 128 vs 2
// of 3 of 16 KB), and the shared memory is that of the 16-bit shapes plus less than one stage.
// NVIDIA narrow form: direct fragments (no converted tile), so twice the 16-bit stages fit in the
// 16-bit shapes' shared memory: 5 of 6 stages of 8 KB in flight at D = 128. `longer`: the shape
// of units that are long (kLongUnitKeys), whatever the grid. An FP8 key costs more instructions
// than a 16-bit one, and with 4 warps each scheduler has one warp to issue from, so the 192 KB of
// the one-block-per-SM shape go to 8 warps of 3 stages; long units run it on large grids too,
// where it is faster than two 96 KB blocks per SM. Short units keep the 4-warp shapes, whose warps
// hold more of their few tiles in flight.
template <int D, bool kF8, bool kNarrow = false>
struct ShapesOf {
  using dflt = DefaultShape<D>;
  using wide = WideShape<D>;
  using longer = dflt;
};
template <int D, bool kNarrow>
struct ShapesOf<D, true, kNarrow> {
#if RK_NVIDIA
  static constexpr int kMinus = kNarrow ? 0 : 1;
  using dflt = Shape<D, DefaultShape<D>::W, DefaultShape<D>::KEYS, 2 * DefaultShape<D>::S - kMinus, 1, kNarrow>;
  using wide = Shape<D, WideShape<D>::W, WideShape<D>::KEYS, 2 * WideShape<D>::S - kMinus, 1, kNarrow>;
  using longer = std::conditional_t<kNarrow, Shape<D, 2 * DefaultShape<D>::W, DefaultShape<D>::KEYS, DefaultShape<D>::S, 1, true>, dflt>;
  static_assert(longer::kSmemBytes <= dflt::kSmemBytes, "the long-unit shape fits where the default does");
#else
  using dflt = Shape<D, DefaultShape<D>::W, DefaultShape<D>::KEYS, DefaultShape<D>::S, 1>;
  using wide = dflt;
  using longer = dflt;
#endif
};
// Units of at least this many keys (estimated on the host: see launch_sized) take `longer`.
constexpr int64_t kLongUnitKeys = 1024;

template <int KEYS>
struct MaskOf { using type = uint32_t; };
template <>
struct MaskOf<64> { using type = uint64_t; };

// Element offset, inside a swizzled [KEYS][D] tile (mma.h smem_index), of the 16-byte chunk that
// this lane copies in copy 0: row lane / kChunks, chunk lane % kChunks. Rows of one copy differ
// only in their low bits, so copy j (rows r0 = j * kRowsPerCopy + ...) is at
// (this ^ ((r0 & 7) << 3)) + r0 * D.
template <class C>
RK_DEVICE int copy_lane_offset(int lane) {
  const int lr = lane / C::kChunks, c = lane % C::kChunks;
  return lr * C::D + ((((c ^ lr) & 7) | (c & ~7)) << 3);
}

// Grid: x = KV head (and chunk), y (and z past 65535) = unit, so the blocks of one unit's KV heads
// are launched, and run, side by side: in both cache layouts a token's K (V) rows of all KV heads
// are one contiguous run (bshd), so the DRAM pages they open serve all heads at once.
// kNarrow (NVIDIA, GQA groups of at most 8): the products run transposed on mma.h's narrow
// blocks, S^T = K Q^T and O^T += V^T P^T with the group's heads as the 8 columns, so no MMA rows
// are padding: half the matrix work, exponentials and accumulator registers of the 16-row form.
template <class T, int PS, class C, bool kNarrow = false, class KV = T>
__global__ void __launch_bounds__(C::kThreads, 1) decode_kernel(const PagedDecodeParams p) {
#if defined(RADIXKV_MMA_FMA) && defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();  // never launched there: launch() picks the CUDA-core kernel on such parts
#else
  constexpr int D = C::D, W = C::W, KEYS = C::KEYS, S = C::S, KB = C::kKB, DB = C::kDB;
  constexpr int IDX = C::kIdx, LA = kLookAhead<S>;
  // FP8 caches (fp8_decode.h): byte stages, converted to fp16 tiles; the products run in fp16.
  constexpr bool kF8 = IsFp8<KV>::value;
  using MT = typename fp8::MathType<T, KV>::type;
  static_assert(C::KVB == static_cast<int>(sizeof(KV)), "shape built for this cache element");
  // Direct FP8 fragments (fp8_decode.h): NVIDIA narrow form only.
  constexpr bool kDirect = C::kDirect;
  static_assert(!kDirect || kNarrow, "direct fragments need the narrow form");
  using DG = fp8::Direct<D, KEYS>;
  using Mask = typename MaskOf<KEYS>::type;
  constexpr Mask kFull = KEYS >= 64 ? ~Mask(0) : Mask((uint64_t(1) << KEYS) - 1);

  extern __shared__ __align__(128) uint4 smem_raw[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sWork = sQ + kRows * D;
  __shared__ int s_last;
  __shared__ int s_max[kRows];  // the combine's maximum m per head (float_max_key)

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int unit = blockIdx.y + gridDim.y * blockIdx.z;
  if (unit >= p.plan_capacity) return;
  const int head_block = blockIdx.x;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int chunks = head_chunks(p);
  const int kvh = head_block / chunks, chunk = head_block % chunks;
  const int h0 = kvh * group + chunk * kRows;  // first query head of this block
  const int rows = min(kRows, group - chunk * kRows);
  // FP8: this head's scales, loaded before the plan row so that their round trip is not added
  // to the chain of dependent loads in front of the first tile.
  const float k_scale = fp8::head_scale<KV>(p, p.scales.k, kvh);
  const float v_scale = fp8::head_scale<KV>(p, p.scales.v, kvh);
  Unit job;
  RequestPages rq;
  guard::Faults faults;
  if (!unit_and_pages<PS>(p, unit, job, rq, faults)) return;  // an unused row
  const int b = job.b;

  const int32_t* pages = rq.pages;
  job = clamp_unit(job, rq.len, kMaxUnits, faults);
  // This unit's tokens; warp w takes tiles w, w + W, ...
  const int begin = job.begin, end = job.end, units = job.count;
  // The row of the request's first unit, read now so that the merge (when this block is the
  // request's last) does not wait on it.
  const int first = units > 1 ? first_unit(p, b, units, faults) : 0;
  const bool rows_agree = units > 1 ? group_rows_agree<C::kThreads>(p, unit, b, first, units, tid) : true;
  const int ntiles = end > begin ? (end - begin + KEYS - 1) / KEYS : 0;
  const int n_my = ntiles > warp ? (ntiles - warp + W - 1) / W : 0;
  auto tile_start = [&](int i) { return begin + (warp + i * W) * KEYS; };
  // Key lane: the key whose page entry this lane reads (slot s: key s * warp + lane).
  const int key_lane = KEYS < kWarpSize ? lane % KEYS : lane;

  auto lookup = [&](int i, int (&raw)[IDX]) {
#pragma unroll
    for (int s = 0; s < IDX; ++s) {
      const int t = tile_start(i) + s * kWarpSize + key_lane;
      raw[s] = (i < n_my && t < end) ? __ldg(pages + t / PS) : kNoKey;
    }
  };

  const int64_t head_off =
      static_cast<int64_t>(kvh) * p.kv_stride_head + (lane % C::kCopyChunks) * (16 / C::KVB);
  // Direct: this lane copies chunk lane % kKRowChunks (kVRowChunks) of each K (V) row it copies.
  const int64_t head_k =
      kDirect ? static_cast<int64_t>(kvh) * p.kv_stride_head + (lane % DG::kKRowChunks) * 16 : head_off;
  const int64_t head_v =
      kDirect ? static_cast<int64_t>(kvh) * p.kv_stride_head + (lane % DG::kVRowChunks) * DG::kVCopy : head_off;
  const KV* kbase = static_cast<const KV*>(p.k_cache) + head_k;
  const KV* vbase = static_cast<const KV*>(p.v_cache) + head_v;
  uint16_t* wK = sWork + warp * C::kWarpElems;  // this warp's K stages, then its V stages
  uint16_t* wV = wK + S * C::kTileElems;        // (FP8: the converted tile, then the byte stages)
  uint8_t* fK = reinterpret_cast<uint8_t*>(kDirect ? wK : wK + C::kTileElems);
  uint8_t* fV = fK + S * C::kTileElems;
  const int lane_off = copy_lane_offset<C>(lane);
  const int lr = lane / C::kCopyChunks;

  // Start the copies of tile i into stage i % S (nothing past this warp's tiles); always commits a
  // group. Returns the tile's valid-key mask (bit k: key k exists and its page index is in range).
  bool bad_page = false;  // a key that exists has a page index outside the pool (guard.h)
  auto issue = [&](int i, const int (&raw)[IDX]) -> Mask {
    // Where each key's row starts (element offset into the cache), held by the key's lane and
    // fetched by the copying lanes with a shuffle. Page size 1: the page entry itself is
    // shuffled, the row is page * stride. Larger pages: the key lane computes the offset once
    // per tile (-1: no row), since unrolling the in-page arithmetic into every copy makes the
    // kernel too large for the instruction cache.
    int pg[IDX];
    int64_t koff[IDX];
    Mask mask = 0;
#pragma unroll
    for (int s = 0; s < IDX; ++s) {
      const bool ok = raw[s] >= 0 && raw[s] < p.num_pages;
      bad_page |= !ok && raw[s] != kNoKey;
      mask |= static_cast<Mask>(warp_ballot(ok)) << (s * kWarpSize);
      pg[s] = ok ? raw[s] : -1;
      if constexpr (PS > 1) {
        const unsigned t = static_cast<unsigned>(tile_start(i) + s * kWarpSize + key_lane);
        koff[s] = ok ? static_cast<int64_t>(raw[s]) * p.kv_stride_page +
                           static_cast<int64_t>(t % PS) * p.kv_stride_slot
                     : int64_t{-1};
      }
    }
    mask &= kFull;
    // Row r of the tile: its key's lane is r % kWarpSize, its slot r / kWarpSize.
    auto row_offset = [&](int r, bool& ok) -> int64_t {
      if constexpr (PS == 1) {
        const int page = shfl(pg[r / kWarpSize], r % kWarpSize);
        ok = page >= 0;
        return ok ? static_cast<int64_t>(page) * p.kv_stride_page : 0;
      } else {
        const int64_t off = shfl(koff[r / kWarpSize], r % kWarpSize);
        ok = off >= 0;
        return ok ? off : 0;
      }
    };
    if (kDirect && i < n_my) {
      // Whole cache lines per instruction (fp8_decode.h Direct): this lane copies chunk j of row
      // i of each group of kKRows (kVRows) rows into the slot of the lane that consumes it.
      uint8_t* sk = fK + (i % S) * C::kTileElems;
      uint8_t* sv = fV + (i % S) * C::kTileElems;
      auto row_off = [&](int kb, int r16, bool& ok) -> int64_t {
        return row_offset(kb * 16 + r16, ok);
      };
      const int ki = lane / DG::kKRowChunks, kj = lane % DG::kKRowChunks;
      const int kt = kj / DG::kKChunks, kc = kj % DG::kKChunks;  // consumer t and its copy c
      const int vi = lane / DG::kVRowChunks, vj = lane % DG::kVRowChunks;
      const int vg = vj / DG::kVChunks, vc = vj % DG::kVChunks;  // consumer g and its copy c
#pragma unroll
      for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s8 = 0; s8 < 8; s8 += DG::kKRows) {
            const int g = s8 + ki;  // K rows g + 8 h are consumed by lanes 4 g + t
            bool ok;
            const int64_t off = row_off(kb, DG::k_row(0, h, g), ok);
            cp_async16(sk + DG::k_slot(kb, h, kc, 4 * g + kt), kbase + off, ok);
          }
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int s4 = 0; s4 < 4; s4 += DG::kVRows) {
            const int t = s4 + vi;  // V rows v_row(q, t) are consumed by lanes 4 g + t
            bool ok;
            const int64_t off = row_off(kb, DG::v_row(0, q, t), ok);
            if constexpr (DG::kVCopy == 16) cp_async16(sv + DG::v_slot(kb, q, vc, 4 * vg + t), vbase + off, ok);
            else cp_async8(sv + DG::v_slot(kb, q, vc, 4 * vg + t), vbase + off, ok);
          }
      }
    } else if (i < n_my) {
      const int st = i % S;
      uint16_t* dk = wK + st * C::kTileElems;
      uint16_t* dv = wV + st * C::kTileElems;
#pragma unroll
      for (int j = 0; j < C::kCopies; ++j) {
        const int r0 = j * C::kRowsPerCopy;
        bool ok;
        const int64_t off = row_offset(r0 + lr, ok);
        if constexpr (kF8) {
          const int so = st * C::kTileElems + fp8::stage_offset(j, lane);
          cp_async16(fK + so, kbase + off, ok);
          cp_async16(fV + so, vbase + off, ok);
        } else {
          const int so = (lane_off ^ ((r0 & 7) << 3)) + r0 * D;
          cp_async16(dk + so, kbase + off, ok);
          cp_async16(dv + so, vbase + off, ok);
        }
      }
    }
    cp_async_commit();
    return mask;
  };

  // Prologue: page entries first (the copies need them), q meanwhile.
  int rawq[LA][IDX];
#pragma unroll
  for (int k = 0; k < LA; ++k) lookup(k, rawq[k]);

  constexpr int kQVecs = (kRows * C::kChunks + C::kThreads - 1) / C::kThreads;
  vec16 qv[kQVecs];
#pragma unroll
  for (int k = 0; k < kQVecs; ++k) {
    const int idx = tid + k * C::kThreads;
    const int r = idx / C::kChunks, c = idx % C::kChunks;
    qv[k] = vec16{{0u, 0u, 0u, 0u}};
    if (idx < kRows * C::kChunks && r < rows)
      qv[k] = load16(static_cast<const T*>(p.q) + b * p.q_stride_b + (h0 + r) * p.q_stride_h + c * 8);
  }

  Mask maskq[S];
  auto issue_next = [&](int i) -> Mask {
    const Mask m = issue(i, rawq[0]);
#pragma unroll
    for (int k = 0; k + 1 < LA; ++k)
#pragma unroll
      for (int s = 0; s < IDX; ++s) rawq[k][s] = rawq[k + 1][s];
    lookup(i + LA, rawq[LA - 1]);
    return m;
  };
  // The first S - 1 tiles' copies, in a loop that is not unrolled: `issue` is the kernel's largest
  // piece of code, and one copy here (plus the main loop's) instead of S - 1 halves the kernel,
  // which a short decode fetches cold. Each pass shifts the masks down: tile k's ends in maskq[k].
  if constexpr (S > 1) {
#pragma unroll 1
    for (int k = 0; k + 1 < S; ++k) {
      const Mask m = issue_next(k);
#pragma unroll
      for (int j = 0; j + 2 < S; ++j) maskq[j] = maskq[j + 1];
      maskq[S - 2] = m;
    }
  }

#pragma unroll
  for (int k = 0; k < kQVecs; ++k) {
    const int idx = tid + k * C::kThreads;
    if (idx < kRows * C::kChunks)
      store16(sQ + mma::smem_index<D>(idx / C::kChunks, (idx % C::kChunks) * 8),
              fp8::q_to_math<T, MT>(qv[k]));
  }
  __syncthreads();  // the q tile is complete (the only barrier before the merge)

  const mma::SmemLane lq = mma::lane_q<D>(sQ);
  const mma::SmemLane lk = mma::lane_k<D>(wK);
  const mma::SmemLane lv = mma::lane_v<D>(kF8 ? wK : wV);
  Frag qf[C::kQRegs && !kNarrow ? DB : 1];
  if constexpr (C::kQRegs && !kNarrow) {
#pragma unroll
    for (int db = 0; db < DB; ++db) mma::load_q<D>(qf[db], lq, 0, db * 16);
  }
#if defined(RADIXKV_MMA_NV)
  // kNarrow state: Q^T B operands (heads 0-7) per 16 dims; O^T [dims x heads] per 16 dims; the
  // running max and sum of this lane's two heads 2 (lane % 4) + j.
  uint32_t qt[kNarrow ? DB : 1][2];
  float ot[kNarrow ? DB : 1][4];
  float mn[2] = {kNegInf, kNegInf}, ln[2] = {0.f, 0.f};
  const mma::SmemLane lka = mma::lane_q<D>(wK);  // K rows as the A operand
  if constexpr (kNarrow) {
    const mma::SmemLane lqb = mma::lane_k<D>(sQ);
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      if constexpr (kDirect) {  // head g, dims t D/4 + 4 db + 0..3: K's dim permutation
        const uint2 q2 = *reinterpret_cast<const uint2*>(
            sQ + mma::smem_index<D>(lane / 4, (lane % 4) * DG::kKBytes + 4 * db));
        qt[db][0] = q2.x;
        qt[db][1] = q2.y;
      } else {
        Frag f;
        mma::load_k<D>(f, lqb, 0, db * 16);
        qt[db][0] = f.x[0];
        qt[db][1] = f.x[1];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) ot[db][e] = 0.f;
    }
  }
#endif

  constexpr int SL = mma::kRowSlots;
  Acc o[DB];
  float m[SL], l[SL];
#pragma unroll
  for (int db = 0; db < DB; ++db) mma::zero(o[db]);
#pragma unroll
  for (int s = 0; s < SL; ++s) {
    m[s] = kNegInf;
    l[s] = 0.f;
  }
  // FP8: the K scale of this KV head joins the softmax scale, the V scale the output's.
  const float c =
      p.sm_scale * kLog2e * fp8::scale_factor<KV, kDirect>(k_scale, guard::kDecodeKScale, faults);
  const float vfac = fp8::scale_factor<KV, kDirect>(v_scale, guard::kDecodeVScale, faults);

  for (int i = 0; i < n_my; ++i) {
    maskq[S - 1] = issue_next(i + S - 1);
    cp_async_wait<S - 1>();  // this lane's copies of tile i have landed ...
    warp_sync();             // ... and every lane's
    const int boff = kF8 ? 0 : (i % S) * C::kTileElems;
    if constexpr (kF8 && !kDirect) fp8::convert_tile<KV, C>(wK, fK + (i % S) * C::kTileElems, lane);
    const Mask mask = maskq[0];
#pragma unroll
    for (int k = 0; k + 1 < S; ++k) maskq[k] = maskq[k + 1];

#if defined(RADIXKV_MMA_NV)
    if constexpr (kNarrow) {
      // S^T = K Q^T (raw scores): per 16-key block, two partial sums over the dims.
      float st[KB][4], st2[KB][4];
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[kb][e] = st2[kb][e] = 0.f;
      if constexpr (kDirect) {
        // K rows g, g + 8 of block kb: 16 bytes = 4 dim blocks per copy, word w = block 4 c + w.
        const uint8_t* sk = fK + (i % S) * C::kTileElems;
#pragma unroll
        for (int kb = 0; kb < KB; ++kb)
#pragma unroll
          for (int cc = 0; cc < DG::kKChunks; ++cc) {
            const uint4 r0 = *reinterpret_cast<const uint4*>(sk + DG::k_slot(kb, 0, cc, lane));
            const uint4 r1 = *reinterpret_cast<const uint4*>(sk + DG::k_slot(kb, 1, cc, lane));
            const uint32_t a0[4] = {r0.x, r0.y, r0.z, r0.w}, a1[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              const int db = 4 * cc + w;
              Frag kf;
              fp8::cvt4<KV>(a0[w], kf.x[0], kf.x[2]);
              fp8::cvt4<KV>(a1[w], kf.x[1], kf.x[3]);
              mma::mma_16816<MT>((db & 1) ? st2[kb] : st[kb], kf.x, qt[db][0], qt[db][1]);
            }
          }
      } else {
#pragma unroll
        for (int db = 0; db < DB; ++db)
#pragma unroll
          for (int kb = 0; kb < KB; ++kb) {
            Frag kf;
            mma::load_q<D>(kf, mma::lane_offset(lka, boff), kb * 16, db * 16);
            mma::mma_16816<MT>((db & 1) ? st2[kb] : st[kb], kf.x, qt[db][0], qt[db][1]);
          }
      }
      // Element e of block kb: key kb * 16 + lane / 4 + 8 (e / 2), head 2 (lane % 4) + e % 2.
      const bool full = mask == kFull;
      const int g = lane / 4;
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = (st[kb][e] + st2[kb][e]) * c;
          if (!full && !((mask >> (kb * 16 + g + 8 * (e >> 1))) & 1)) v = kNegInf;
          st[kb][e] = v;
          mx[e & 1] = fmaxf(mx[e & 1], v);
        }
      float corr[2], ms[2];
      bool grew = false;
#pragma unroll
      for (int j = 0; j < 2; ++j) grew |= online_max_step(mn[j], mma::head_max(mx[j]), ms[j], corr[j]);
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = fast_exp2(st[kb][e] - ms[e & 1]);
          st[kb][e] = pv;
          sum[e & 1] += pv;
        }
#pragma unroll
      for (int j = 0; j < 2; ++j) ln[j] = fmaf(ln[j], corr[j], sum[j]);  // lane partial
      if (warp_any(grew)) {
#pragma unroll
        for (int db = 0; db < DB; ++db)
#pragma unroll
          for (int e = 0; e < 4; ++e) ot[db][e] *= corr[e & 1];
      }
      // O^T += V^T P^T
      if constexpr (kF8 && !kDirect) fp8::convert_v<KV, C>(wK, fV + (i % S) * C::kTileElems, lane);
#pragma unroll
      for (int kb = 0; kb < KB; ++kb) {
        uint32_t b0, b1;
        mma::pt_from_acc<MT>(b0, b1, st[kb]);
        if constexpr (kDirect) {
          // Key rows 2t, 2t+1, 2t+8, 2t+9 (q = 0..3); byte 2 db' + h of a copy is output row
          // g + 8 h of block db = kVCopy / 2 * cc + db'. prmt pairs rows (0, 1) and (2, 3).
          const uint8_t* sv = fV + (i % S) * C::kTileElems;
#pragma unroll
          for (int cc = 0; cc < DG::kVChunks; ++cc) {
            uint32_t rv[4][4];
#pragma unroll
            for (int q = 0; q < 4; ++q) fp8::lds_words<DG::kVCopy>(rv[q], sv + DG::v_slot(kb, q, cc, lane));
#pragma unroll
            for (int w = 0; w < DG::kVCopy / 4; ++w)
#pragma unroll
              for (int hb = 0; hb < 2; ++hb) {
                const int db = cc * (DG::kVCopy / 2) + 2 * w + hb;
                const uint32_t sel = hb ? 0x7362u : 0x5140u;  // bytes (2hb, 2hb+1) of both rows
                Frag vf;
                fp8::cvt4<KV>(__byte_perm(rv[0][w], rv[1][w], sel), vf.x[0], vf.x[1]);
                fp8::cvt4<KV>(__byte_perm(rv[2][w], rv[3][w], sel), vf.x[2], vf.x[3]);
                mma::mma_16816<MT>(ot[db], vf.x, b0, b1);
              }
          }
        } else {
#pragma unroll
          for (int db = 0; db < DB; ++db) {
            Frag vf;
            mma::load_vt<D>(vf, mma::lane_offset(lk, (kF8 ? 0 : C::S * C::kTileElems) + boff), kb * 16, db * 16);
            mma::mma_16816<MT>(ot[db], vf.x, b0, b1);
          }
        }
      }
    }
#endif
    if constexpr (!kNarrow) {
      // S = Q K^T (raw scores), two partial sums per block to halve the MMA dependency chain.
      Acc sc[KB], sc2[KB];
#pragma unroll
      for (int kb = 0; kb < KB; ++kb) {
        mma::zero(sc[kb]);
        mma::zero(sc2[kb]);
      }
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        Frag qd;
        if constexpr (C::kQRegs) qd = qf[db];
        else mma::load_q<D>(qd, lq, 0, db * 16);
#pragma unroll
        for (int kb = 0; kb < KB; ++kb) {
          Frag kf;
          mma::load_k<D>(kf, mma::lane_offset(lk, boff), kb * 16, db * 16);
          mma::mma_qk<MT>((db & 1) ? sc2[kb] : sc[kb], qd, kf);
        }
      }
      // Scale to log2 units, mask missing keys, new running max per head row.
      float mx[SL];
#pragma unroll
      for (int s = 0; s < SL; ++s) mx[s] = kNegInf;
      const bool full = mask == kFull;
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int e = 0; e < mma::kAccElems; ++e) {
          float v = (sc[kb].x[e] + sc2[kb].x[e]) * c;
          if (!full) {
            const int key = kb * 16 + mma::acc_other(e);
            if (!((mask >> key) & 1)) v = kNegInf;
          }
          sc[kb].x[e] = v;
          mx[mma::acc_slot(e)] = fmaxf(mx[mma::acc_slot(e)], v);
        }
      float corr[SL], ms[SL];
      bool grew = false;
#pragma unroll
      for (int s = 0; s < SL; ++s) grew |= online_max_step(m[s], mma::row_max(mx[s]), ms[s], corr[s]);
      float sum[SL];
#pragma unroll
      for (int s = 0; s < SL; ++s) sum[s] = 0.f;
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
#pragma unroll
        for (int e = 0; e < mma::kAccElems; ++e) {
          const float pv = fast_exp2(sc[kb].x[e] - ms[mma::acc_slot(e)]);
          sc[kb].x[e] = pv;
          sum[mma::acc_slot(e)] += pv;
        }
#pragma unroll
      for (int s = 0; s < SL; ++s) l[s] = fmaf(l[s], corr[s], sum[s]);  // lane partial; summed at the end
      if (warp_any(grew)) {  // uniform branch; rare once the maxima settle
#pragma unroll
        for (int db = 0; db < DB; ++db)
#pragma unroll
          for (int e = 0; e < mma::kAccElems; ++e) o[db].x[e] *= corr[mma::acc_slot(e)];
      }
      // O += P V
      if constexpr (kF8) fp8::convert_v<KV, C>(wK, fV + (i % S) * C::kTileElems, lane);
#pragma unroll
      for (int kb = 0; kb < KB; ++kb) {
        Frag pf;
        mma::p_from_acc<MT>(pf, sc[kb]);
#pragma unroll
        for (int db = 0; db < DB; ++db) {
          Frag vf;
          mma::load_v<D>(vf, mma::lane_offset(lv, boff), kb * 16, db * 16);
          mma::mma_pv<MT>(o[db], pf, vf);
        }
      }
    }
    warp_sync();  // stage i % S is refilled by the next iteration's copies
  }
  cp_async_wait<0>();
  if (bad_page) faults.checks |= guard::kPageRange;
  guard::report(p.status, guard::kPagedDecode, faults);
  // More warps than the default shape: the `longer` shape of FP8 units.
  constexpr uint32_t kShapeBit = W > DefaultShape<D>::W ? guard::kRanMma8Warps : 0u;
  guard::ran(p.status, (kNarrow ? guard::kRanMmaNarrow : guard::kRanMma) | kShapeBit);
#pragma unroll
  for (int s = 0; s < SL; ++s) l[s] = mma::row_sum(l[s]);
#if defined(RADIXKV_MMA_NV)
  if constexpr (kNarrow) {
#pragma unroll
    for (int j = 0; j < 2; ++j) ln[j] = mma::head_sum(ln[j]);
  }
#endif
  // Every warp is done with its stages (the merge area overlaps them), and the block's verdict
  // on its merge group (group_rows_agree): a request of several units whose rows disagree has
  // each of its blocks write its own partial as the output (a bad plan's output) and leave the
  // counter alone.
  const bool merged = __syncthreads_and(rows_agree) != 0 && units > 1;
  if (units > 1 && !merged && tid == 0) guard::report_extra(p.status, guard::kDecodePlan);

  // Merge the warps' states. Shared memory: o [W][16][kOStride], m, l, wgt [W][16], L, M [16].
  constexpr int OS = C::kOStride;
  float* sm_o = reinterpret_cast<float*>(sWork);
  float* sm_m = sm_o + W * kRows * OS;
  float* sm_l = sm_m + W * kRows;
  float* sm_w = sm_l + W * kRows;
  float* sm_L = sm_w + W * kRows;
  float* sm_M = sm_L + kRows;
#if defined(RADIXKV_MMA_NV)
  if constexpr (kNarrow) {  // O^T element e of block db: dim db * 16 + lane / 4 + 8 (e / 2)
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // direct FP8: rows are permuted dims (fp8_decode.h Direct)
        const int dim = kDirect ? DG::out_dim(db, lane / 4, e >> 1) : db * 16 + lane / 4 + 8 * (e >> 1);
        sm_o[(warp * kRows + 2 * (lane % 4) + (e & 1)) * OS + dim] = ot[db][e];
      }
    if (lane < 8) {  // lanes 4-7: the unused rows 8-15 (their O rows are never read)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        sm_m[warp * kRows + 2 * lane + j] = lane < 4 ? mn[j] : kNegInf;
        sm_l[warp * kRows + 2 * lane + j] = lane < 4 ? ln[j] : 0.f;
      }
    }
  }
#endif
  if constexpr (!kNarrow) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < mma::kAccElems; e += 2) {  // elements e, e + 1: adjacent dims of one row
        float* dst = sm_o + (warp * kRows + mma::acc_query(e)) * OS + db * 16 + mma::acc_other(e);
        *reinterpret_cast<float2*>(dst) = make_float2(o[db].x[e], o[db].x[e + 1]);
      }
#pragma unroll
    for (int s = 0; s < SL; ++s) {  // lanes of a row hold the same values: any may write
      sm_m[warp * kRows + mma::slot_query(s)] = m[s];
      sm_l[warp * kRows + mma::slot_query(s)] = l[s];
    }
  }
  __syncthreads();
  if (tid < kRows) {
    float M = kNegInf;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, sm_m[w * kRows + tid]);
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float wt = rescale(sm_m[w * kRows + tid], M);
      sm_w[w * kRows + tid] = wt;
      L = fmaf(sm_l[w * kRows + tid], wt, L);
    }
    sm_L[tid] = L;
    sm_M[tid] = M;
  }
  __syncthreads();

  const int64_t ws_rows = static_cast<int64_t>(p.plan_capacity) * p.num_q_heads;
  constexpr int D4 = D / 4;
  T* out = static_cast<T*>(p.out);
  auto store4 = [&](int64_t row, int d, float4 v) {  // 4 output elements of one head row
    uint2 w;
    w.x = mma::pack2<T>(v.x, v.y);
    w.y = mma::pack2<T>(v.z, v.w);
    *reinterpret_cast<uint2*>(out + row * D + d) = w;
  };
  for (int idx = tid; idx < rows * D4; idx += C::kThreads) {
    const int r = idx / D4, d = (idx % D4) * 4;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(sm_o + (w * kRows + r) * OS + d);
      const float wt = sm_w[w * kRows + r];
      a.x = fmaf(x.x, wt, a.x);
      a.y = fmaf(x.y, wt, a.y);
      a.z = fmaf(x.z, wt, a.z);
      a.w = fmaf(x.w, wt, a.w);
    }
    const float inv = finalize_scale(sm_L[r]) * vfac;
    a = make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv);
    const int64_t qrow = static_cast<int64_t>(b) * p.num_q_heads + h0 + r;
    if (!merged) {
      store4(qrow, d, a);
    } else {
      const int64_t row = static_cast<int64_t>(unit) * p.num_q_heads + h0 + r;
      *reinterpret_cast<float4*>(p.workspace + row * D + d) = a;
      if (d == 0) {
        p.workspace[ws_rows * D + row] = sm_L[r] > 0.f ? sm_M[r] : kNegInf;
        p.workspace[ws_rows * (D + 1) + row] = sm_L[r];
      }
    }
  }
  if (!merged) return;

  // Fused combine: the last block of this (request, KV head, chunk) merges the request's units.
  int* counter = p.counters + (static_cast<int64_t>(b) * p.num_kv_heads + kvh) * chunks + chunk;
  if (tid < kRows) s_max[tid] = float_max_key(kNegInf);
  ticket_fence();
  __syncthreads();  // the block's partial is written
  if (tid == 0) s_last = ticket_acq_rel(counter) == units - 1;
  __syncthreads();
  if (!s_last) return;
  ticket_fence();  // the other blocks' partials (written before their tickets)

  const int NS = units;
  float* cw = reinterpret_cast<float*>(sWork);  // [NS][16]: m, then the weight
  float* cl = cw + kMaxUnits * kRows;          // [NS][16]: l
  // Partials of unit first + s sit split_rows * s rows after those of the first unit.
  const int64_t split_rows = p.num_q_heads;
  const int64_t row_b = static_cast<int64_t>(first) * p.num_q_heads + h0;
  const int64_t out_b = static_cast<int64_t>(b) * p.num_q_heads + h0;
  // The partials of this thread's first output item for the first kPre partitions are loaded
  // now, in the same round trip as the (m, l) below (Llama's 4 heads x D/4: one item per thread).
  constexpr int kPre = 16;
  float4 pre[kPre];
  const bool has_pre = tid < rows * D4;
  if (has_pre) {
    const float* part = p.workspace + (row_b + tid / D4) * D + (tid % D4) * 4;
#pragma unroll
    for (int s = 0; s < kPre; ++s)
      if (s < NS) pre[s] = load_coherent4(part + s * split_rows * D);
  }
  // Each pass issues all its (m, l) loads before storing any: one round trip per 2 kThreads
  // (unit, head) pairs. The maximum per head is taken as they land (a shared atomic), so the
  // weights are one step per (unit, head) and the sums of weights come with the output's.
#pragma unroll 1
  for (int base = 0; base < NS * rows; base += 2 * C::kThreads) {
    float mv[2], lv[2];
    int slot[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int idx = base + tid + j * C::kThreads;
      slot[j] = -1;
      if (idx < NS * rows) {
        const int s = idx / rows, r = idx % rows;
        const int64_t row = s * split_rows + row_b + r;
        slot[j] = s * kRows + r;
        mv[j] = load_coherent(p.workspace + ws_rows * D + row);
        lv[j] = load_coherent(p.workspace + ws_rows * (D + 1) + row);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (slot[j] >= 0) {
        cw[slot[j]] = mv[j];
        cl[slot[j]] = lv[j];
        atomicMax(&s_max[slot[j] % kRows], float_max_key(mv[j]));
      }
  }
  __syncthreads();
  for (int idx = tid; idx < NS * rows; idx += C::kThreads) {
    const int k = (idx / rows) * kRows + idx % rows;
    cw[k] = cl[k] * rescale(cw[k], max_key_float(s_max[idx % rows]));  // empty: l = 0
  }
  __syncthreads();
  for (int idx = tid; idx < rows * D4; idx += C::kThreads) {
    const int r = idx / D4, d = (idx % D4) * 4;
    const float* part = p.workspace + (row_b + r) * D + d;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    float L = 0.f;  // the sum of weights, in the same order on every thread of the head
    int s0 = 0;
    if (idx == tid && has_pre) {
#pragma unroll
      for (int s = 0; s < kPre; ++s) {
        if (s < NS) {
          const float wt = cw[s * kRows + r];
          a.x = fmaf(pre[s].x, wt, a.x);
          a.y = fmaf(pre[s].y, wt, a.y);
          a.z = fmaf(pre[s].z, wt, a.z);
          a.w = fmaf(pre[s].w, wt, a.w);
          L += wt;
        }
      }
      s0 = kPre;
    }
#pragma unroll 8
    for (int s = s0; s < NS; ++s) {
      const float4 x = load_coherent4(part + s * split_rows * D);
      const float wt = cw[s * kRows + r];
      a.x = fmaf(x.x, wt, a.x);
      a.y = fmaf(x.y, wt, a.y);
      a.z = fmaf(x.z, wt, a.z);
      a.w = fmaf(x.w, wt, a.w);
      L += wt;
    }
    const float inv = finalize_scale(L);
    store4(out_b + r, d, make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv));
  }
  if (tid == 0) *counter = 0;  // ready for the next launch (stream order)
#endif
}

// Raise a shape's dynamic shared-memory limit (a host call, not a stream op).
template <class T, int PS, class C, bool kNarrow, class KV = T>
void allow_shape_smem() {
  allow_dynamic_smem(decode_kernel<T, PS, C, kNarrow, KV>, C::kSmemBytes);
}

template <class T, int PS, class C, bool kNarrow, class KV = T>
void launch_shape(const PagedDecodeParams& p, Stream stream) {
  const int chunks = head_chunks(p);
  constexpr int kMaxGridY = 65535;
  const int gy = p.plan_capacity < kMaxGridY ? p.plan_capacity : kMaxGridY;
  const dim3 grid(p.num_kv_heads * chunks, gy, (p.plan_capacity + gy - 1) / gy);
  auto kernel = decode_kernel<T, PS, C, kNarrow, KV>;  // limit raised by launch_sized
  kernel<<<grid, C::kThreads, C::kSmemBytes, static_cast<stream_t>(stream)>>>(p);
  const error_t e = last_error();
  if (e != kSuccess) throw LaunchError(std::string("radixkv paged_decode launch: ") + error_string(e));
}

// The shape for this launch: units that are long on average take the `longer` shape (FP8);
// otherwise 192 KB blocks while the grid fits one block per SM, else 96 KB ones. The host does
// not see the lengths, so the page list bounds them: its entries (CSR) or rows times columns
// (block tables), in tokens, over the plan's rows. A plan sized for graph replay has rows to
// spare, which only lowers the estimate (a 4-warp shape, correct either way).
template <class T, int D, int PS, bool kNarrow, class KV = T>
void launch_sized(const PagedDecodeParams& p, Stream stream) {
  using Shapes = ShapesOf<D, IsFp8<KV>::value, kNarrow>;
  // Every shape's limit once per device, at the first call, so that a graph captured later,
  // whichever shape its batch takes, meets no attribute call.
  static bool attr_set[64] = {};
  const int dev = current_device();
  if (dev < 0 || dev >= 64 || !attr_set[dev]) {
    allow_shape_smem<T, PS, typename Shapes::dflt, kNarrow, KV>();
    allow_shape_smem<T, PS, typename Shapes::wide, kNarrow, KV>();
    allow_shape_smem<T, PS, typename Shapes::longer, kNarrow, KV>();
    if (dev >= 0 && dev < 64) attr_set[dev] = true;
  }
  if constexpr (!std::is_same<typename Shapes::longer, typename Shapes::dflt>::value) {
    const int64_t pages = p.kv_indptr != nullptr ? p.table_len : int64_t(p.batch) * p.table_cols;
    if (p.plan_capacity > 0 && pages * PS >= kLongUnitKeys * p.plan_capacity)
      return launch_shape<T, PS, typename Shapes::longer, kNarrow, KV>(p, stream);
  }
  const int64_t blocks = static_cast<int64_t>(p.plan_capacity) * p.num_kv_heads * head_chunks(p);
  if (blocks > sm_count()) return launch_shape<T, PS, typename Shapes::wide, kNarrow, KV>(p, stream);
  launch_shape<T, PS, typename Shapes::dflt, kNarrow, KV>(p, stream);
}

// The form and shape for this call: GQA groups of at most 8 run the narrow (transposed) form on
// NVIDIA.
template <class T, int D, int PS, class KV = T>
void launch_auto(const PagedDecodeParams& p, Stream stream) {
#if RK_NVIDIA
  if (p.num_q_heads <= 8 * p.num_kv_heads) return launch_sized<T, D, PS, true, KV>(p, stream);
#endif
  launch_sized<T, D, PS, false, KV>(p, stream);
}

}  // namespace decode_mma
}  // namespace rk
