// hip/extend_attention.cu -- prefix-prefill ("extend") attention on the paged KV cache.
//
// Grid: x = query tile (over all requests), y = KV head. A tile is kBM rows, where a row is a
// (query position, query head of this KV group) pair: every query head that reads KV head y
// shares the tile, so each K/V tile brought into shared memory serves the whole GQA group.
//
// Per tile, the keys are walked in kBN-wide tiles in two stages:
//   1. dense:  key tiles whose every key is visible to every row of the tile (the cached prefix,
//              plus the part of the new tokens left of the tile's first query): no mask math;
//   2. masked: the tiles crossing the diagonal, with j <= i + (L_k - L_q) applied per element.
//   The loop stops at the tile holding the tile's last visible key, so tiles wholly above the
//   diagonal are never loaded.
// K/V tiles are gathered through the page table into double-buffered shared memory (cp.async on
// NVIDIA); the copy of tile n+1 overlaps the math of tile n. The page table is walked
// incrementally: one walker thread per key row keeps (logical page, offset, address) and
// advances the address by the difference between consecutive pages (the Hygon k_delta trick),
// publishing row addresses for the copy threads one tile ahead.
//
// Rows past L_k (the tail of the last tile) are zero-filled in shared memory, never read, and
// masked, so NaN in padding slots cannot reach a result (p = 0 and V = 0, never NaN * 0).
//
// Online softmax state per query row (per lane slot, see mma.h):
//   m: running max of the raw scores (-inf while empty), l: running sum of exp2((s - m) * c)
//   over this lane's keys (summed across lanes once, at the end), O: running sum of p * V.
//   c = sm_scale * log2(e): scores are scaled inside exp2 only. An empty state (m = -inf)
//   rescales by 0 and subtracts 0, so no inf - inf ever forms. O and l are rescaled only when
//   some row's max grew (a warp vote); otherwise the factor would be exactly 1.
//
// Tuning (NVIDIA, D = 128; bench/NOTES.md "Extend" has the measurements): 4 warps x 32 rows,
// 64-key tiles, one barrier per tile, the swizzle folded into one XOR per ldmatrix address.
// AMD uses smaller tiles (gfx90a has 64 KB of LDS) and plain loads for the copies.
#include "extend_attention.h"

#include "dispatch.h"
#include "mma.h"
#include "platform.h"
#include "softmax.h"

// Tuning knobs (NVIDIA, head_dim 128): warps per CTA, 16-row blocks per warp, key-tile width;
// whether K and V of a tile are waited for separately (two barriers per tile) or together (one).
#ifndef RADIXKV_EXT_W128
#define RADIXKV_EXT_W128 4
#endif
#ifndef RADIXKV_EXT_MT128
#define RADIXKV_EXT_MT128 2
#endif
#ifndef RADIXKV_EXT_BN128
#define RADIXKV_EXT_BN128 64
#endif
#ifndef RADIXKV_EXT_SPLIT_WAIT
#define RADIXKV_EXT_SPLIT_WAIT 0
#endif
#ifndef RADIXKV_EXT_MMA_ROWSUM
#define RADIXKV_EXT_MMA_ROWSUM 0  // NVIDIA: softmax row sums on the tensor cores (P x ones)
#endif
#ifndef RADIXKV_EXT_MIN_BLOCKS
#define RADIXKV_EXT_MIN_BLOCKS 1
#endif
#ifndef RADIXKV_EXT_KK_UNROLL
#define RADIXKV_EXT_KK_UNROLL 4  // head-dim steps of S = Q K^T kept in flight (register budget)
#endif

namespace rk {
namespace extend_detail {

constexpr int kKKUnroll = RADIXKV_EXT_KK_UNROLL;

using mma::Acc;
using mma::Frag;

// Shuffle-up for the tile lookup's prefix sum (platform.h has xor and indexed shuffles only).
RK_DEVICE int shfl_up_int(int v, int delta) {
#if RK_AMD
  return __shfl_up(v, delta);
#else
  return __shfl_up_sync(0xffffffffu, v, delta);
#endif
}

// ----------------------------------------------------------------------------- tiling

// kWarps warps; each owns kMT blocks of 16 rows; keys move in tiles of kBN. NVIDIA: 32 rows per
// warp halves shared-memory traffic per FLOP; AMD (gfx90a has 64 KB of LDS): smaller tiles.
template <int D>
struct Tiling;
#if RK_AMD
template <> struct Tiling<64> { static constexpr int kWarps = 4, kMT = 1, kBN = 32; };
template <> struct Tiling<128> { static constexpr int kWarps = 4, kMT = 1, kBN = 32; };
template <> struct Tiling<256> { static constexpr int kWarps = 2, kMT = 1, kBN = 16; };
#else
template <> struct Tiling<64> { static constexpr int kWarps = 4, kMT = 2, kBN = 64; };
template <> struct Tiling<128> {
  static constexpr int kWarps = RADIXKV_EXT_W128, kMT = RADIXKV_EXT_MT128, kBN = RADIXKV_EXT_BN128;
};
template <> struct Tiling<256> { static constexpr int kWarps = 4, kMT = 1, kBN = 32; };
#endif

template <int D>
struct Cfg {
  static constexpr int kWarps = Tiling<D>::kWarps;
  static constexpr int kMT = Tiling<D>::kMT;
  static constexpr int kBN = Tiling<D>::kBN;
  static constexpr int kBM = kWarps * 16 * kMT;  // rows per tile
  static constexpr int kThreads = kWarps * rk::kWarpSize;
  static constexpr int kChunks = D / 8;           // 16-byte chunks per row
  static constexpr int kQElems = kBM * D;
  static constexpr int kKVElems = kBN * D;
  // Q tile, K[2], V[2] (16-bit elements), then the row-address tables int64 [2][kBN].
  static constexpr int kSmemBytes = (kQElems + 4 * kKVElems) * 2 + 2 * kBN * 8;
  static_assert(kBN <= kThreads, "one walker thread per key row");
};

// ----------------------------------------------------------------------------- tile lookup

// Map blockIdx.x to (request, tile of that request). Tiles are numbered request by request;
// each warp scans qo_indptr in chunks of kWarpSize requests (O(B / 32) steps, no shared memory).
template <int kBM>
RK_DEVICE bool find_tile(const ExtendParams& p, int group, int x, int& req, int& tile) {
  const int lane = threadIdx.x % rk::kWarpSize;
  int base = 0;
  for (int b0 = 0; b0 < p.batch; b0 += rk::kWarpSize) {
    const int b = b0 + lane;
    int n = 0;
    if (b < p.batch) {
      const int lq = p.qo_indptr[b + 1] - p.qo_indptr[b];
      n = lq > 0 ? (lq * group + kBM - 1) / kBM : 0;
    }
    int incl = n;
#pragma unroll
    for (int off = 1; off < rk::kWarpSize; off *= 2) {
      const int y = shfl_up_int(incl, off);
      if (lane >= off) incl += y;
    }
    const int total = shfl(incl, rk::kWarpSize - 1);
    if (x < base + total) {
      int mine = (x >= base + incl - n && x < base + incl) ? lane : 0;
#pragma unroll
      for (int off = rk::kWarpSize / 2; off > 0; off /= 2) mine = max(mine, shfl_xor(mine, off));
      const int before = shfl(incl - n, mine);
      req = b0 + mine;
      tile = x - base - before;
      return true;
    }
    base += total;
  }
  return false;
}

// ----------------------------------------------------------------------------- page walker

// Per-request page-table view: CSR row or block-table row, with the number of pages it may hold.
struct PageRow {
  const int32_t* pages;
  int cols;  // entries that may be read (block-table mode: max_blocks; CSR: unbounded)
};

// One thread per key row r of a key tile: tracks key j = n * kBN + r as (logical page, offset,
// element address) and moves kBN keys forward per tile by adding the address difference between
// the old and the new (page, offset): the Hygon design's k_delta / v_delta walk. The page-table
// entry of the following tile is loaded one step early (nraw), so publishing a tile's row address
// never waits on a global load.
struct PageWalker {
  int key, page_idx, off, phys;  // the published tile's key row
  int64_t addr;                  // phys * kv_stride_page + off * kv_stride_slot
  bool ok;                       // its page index was inside the table and the pool
  int nkey, npage_idx, noff;     // the next tile's key row
  int nraw;                      // its page-table entry (-1: none to read)

  RK_DEVICE static int fetch(const PageRow& row, int pidx, int k, int lk) {
    return k < lk && pidx < row.cols ? row.pages[pidx] : -1;
  }
  RK_DEVICE void step_next(int step_pages, int step_off, int step_keys, int page_size) {
    nkey = key + step_keys;
    npage_idx = page_idx + step_pages;
    noff = off + step_off;
    if (noff >= page_size) {
      noff -= page_size;
      ++npage_idx;
    }
  }
  RK_DEVICE void init(const PageRow& row, int r, const ExtendParams& p, int lk, int step_pages,
                      int step_off, int step_keys) {
    key = r;
    page_idx = r / p.page_size;
    off = r - page_idx * p.page_size;
    const int raw = fetch(row, page_idx, key, lk);
    ok = raw >= 0 && raw < p.num_pages;
    phys = ok ? raw : 0;
    addr = int64_t(phys) * p.kv_stride_page + int64_t(off) * p.kv_stride_slot;
    step_next(step_pages, step_off, step_keys, p.page_size);
    nraw = fetch(row, npage_idx, nkey, lk);
  }
  // Move to the next tile (its entry was fetched a step ago) and fetch the one after.
  RK_DEVICE void advance(const PageRow& row, const ExtendParams& p, int lk, int step_pages,
                         int step_off, int step_keys) {
    const int old_off = off;
    key = nkey;
    page_idx = npage_idx;
    off = noff;
    int nphys = phys;
    if (key < lk) {
      ok = nraw >= 0 && nraw < p.num_pages;
      nphys = ok ? nraw : phys;
    }
    addr += int64_t(nphys - phys) * p.kv_stride_page + int64_t(off - old_off) * p.kv_stride_slot;
    phys = nphys;
    step_next(step_pages, step_off, step_keys, p.page_size);
    nraw = fetch(row, npage_idx, nkey, lk);
  }
  // Row byte offset for the copy threads; -1 = zero-fill (past L_k, or a bad page index).
  RK_DEVICE int64_t published(int lk) const { return key < lk && ok ? addr * 2 : int64_t(-1); }
};

// Copies of [kBN][D] key/value tiles: thread t moves chunk t % (D/8) of rows t / (D/8) + i * step.
// Row byte offsets come from the walker's table (`rows`, negative = zero-fill).
template <int D, int kBN, int kThreads>
struct TileCopy {
  static constexpr int kChunks = D / 8;
  static constexpr int kPasses = kBN * kChunks / kThreads;
  static constexpr int kRowStep = kThreads / kChunks;
  static_assert((kBN * kChunks) % kThreads == 0 && kThreads % kChunks == 0, "whole copy passes");
  int r0, c8, dst0;
  const char* k_src;  // this KV head's chunk c of row offset 0 (bytes)
  const char* v_src;

  RK_DEVICE TileCopy(const uint16_t* k_head, const uint16_t* v_head) {
    r0 = threadIdx.x / kChunks;
    c8 = (threadIdx.x % kChunks) * 8;
    dst0 = mma::smem_index<D>(r0, c8);
    k_src = reinterpret_cast<const char*>(k_head + c8);
    v_src = reinterpret_cast<const char*>(v_head + c8);
  }
  RK_DEVICE int dst(int it) const {
    // Rows 8 apart share their swizzle: a constant step then.
    return kRowStep % 8 == 0 ? dst0 + it * kRowStep * D
                             : mma::smem_index<D>(r0 + it * kRowStep, c8);
  }
  template <bool kK, bool kV>
  RK_DEVICE void copy(uint16_t* dk, uint16_t* dv, const int64_t* rows) const {
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int64_t a = rows[r0 + it * kRowStep];
      const bool valid = a >= 0;
      const int64_t off = valid ? a : 0;
      if (kK) mma::async_copy16(dk + dst(it), k_src + off, valid);
      if (kV) mma::async_copy16(dv + dst(it), v_src + off, valid);
    }
  }
};

// ----------------------------------------------------------------------------- the kernel

template <bool kMasked>
struct MaskTag {
  static constexpr bool value = kMasked;
};

template <class T, int D>
__global__ void __launch_bounds__(Cfg<D>::kThreads, RADIXKV_EXT_MIN_BLOCKS)
extend_attention_kernel(const ExtendParams p) {
  using C = Cfg<D>;
  constexpr int kMT = C::kMT, kBN = C::kBN, kBM = C::kBM, kThreads = C::kThreads;
  constexpr int kKB = kBN / 16;  // 16-key blocks per key tile
  constexpr int kDB = D / 16;    // 16-wide blocks along head_dim
  constexpr int kSlots = mma::kRowSlots;
  constexpr bool kSplitWait = RADIXKV_EXT_SPLIT_WAIT != 0;
  constexpr bool kMmaSum = mma::kHasMmaRowSum && RADIXKV_EXT_MMA_ROWSUM != 0;

  extern __shared__ __align__(128) uint4 smem_raw[];  // 128-byte aligned tiles (mma.h)
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sK = sQ + C::kQElems;       // [2][kBN][D]
  uint16_t* sV = sK + 2 * C::kKVElems;  // [2][kBN][D]
  int64_t* sRows = reinterpret_cast<int64_t*>(sV + 2 * C::kKVElems);  // [2][kBN]

  const int G = p.num_q_heads / p.num_kv_heads;
  int req, tile_in_req;
  if (!find_tile<kBM>(p, G, blockIdx.x, req, tile_in_req)) return;  // surplus CTA
  const int kvh = blockIdx.y;
  const int q_begin = p.qo_indptr[req];
  const int lq = p.qo_indptr[req + 1] - q_begin;
  const int lk = p.kv_lens[req];
  const int n_tiles_req = (lq * G + kBM - 1) / kBM;
  // Later tiles see more keys: run them first (better tail balance).
  const int tile = n_tiles_req - 1 - tile_in_req;
  const int row0 = tile * kBM;                       // first packed row of this tile
  const int rows_valid = min(kBM, lq * G - row0);
  const int prefix = lk - lq;                        // L_k - L_q

  const uint16_t* q = static_cast<const uint16_t*>(p.q);
  uint16_t* out = static_cast<uint16_t*>(p.out);

  if (prefix < 0) {
    // More queries than keys: no valid mask exists. Write NaN rather than garbage (the Python
    // wrapper rejects such input before launching when it can read the lengths).
    const uint32_t nan2 = mma::pack2<T>(__int_as_float(0x7fc00000), __int_as_float(0x7fc00000));
    for (int idx = threadIdx.x; idx < rows_valid * (D / 2); idx += kThreads) {
      const int r = row0 + idx / (D / 2), d = 2 * (idx % (D / 2));
      const int pos = r / G, h = r % G;
      *reinterpret_cast<uint32_t*>(out + int64_t(q_begin + pos) * p.o_stride_tok +
                                   int64_t(kvh * G + h) * p.o_stride_head + d) = nan2;
    }
    return;
  }

  const int pos_first = row0 / G;
  const int pos_last = (row0 + rows_valid - 1) / G;
  const int keys_needed = pos_last + prefix + 1;           // <= lk
  const int n_kv_tiles = (keys_needed + kBN - 1) / kBN;
  const int n_dense = (pos_first + prefix + 1) / kBN;      // tiles visible to every row

  PageRow pages;
  if (p.kv_indptr == nullptr) {
    pages.pages = p.page_table + int64_t(req) * p.table_stride;
    pages.cols = p.table_cols;
  } else {
    pages.pages = p.page_table + p.kv_indptr[req];
    pages.cols = 0x7fffffff;
  }
  const uint16_t* kbase = static_cast<const uint16_t*>(p.k_cache) + int64_t(kvh) * p.kv_stride_head;
  const uint16_t* vbase = static_cast<const uint16_t*>(p.v_cache) + int64_t(kvh) * p.kv_stride_head;

  // Page walker: thread r < kBN owns key row r. Publish tiles 0 and 1.
  const int step_pages = kBN / p.page_size;
  const int step_off = kBN - step_pages * p.page_size;
  PageWalker walker;
  const bool is_walker = threadIdx.x < kBN;
  if (is_walker) {
    walker.init(pages, threadIdx.x, p, lk, step_pages, step_off, kBN);
    sRows[threadIdx.x] = walker.published(lk);
    walker.advance(pages, p, lk, step_pages, step_off, kBN);
    sRows[kBN + threadIdx.x] = walker.published(lk);
  }

  // Q tile: row r is (position (row0 + r) / G, head kvh * G + (row0 + r) % G); rows past the
  // request are zero-filled (their results are never stored).
  for (int idx = threadIdx.x; idx < kBM * C::kChunks; idx += kThreads) {
    const int r = idx / C::kChunks, c = idx % C::kChunks;
    const int pr = row0 + r;
    const bool valid = r < rows_valid;
    const int pos = pr / G, h = pr - pos * G;
    const uint16_t* src =
        q + (valid ? int64_t(q_begin + pos) * p.q_stride_tok + int64_t(kvh * G + h) * p.q_stride_head
                   : 0) + c * 8;
    mma::async_copy16(sQ + mma::smem_index<D>(r, c * 8), src, valid);
  }
  __syncthreads();  // sRows[0] visible
  const TileCopy<D, kBN, kThreads> copy(kbase, vbase);
  if (kSplitWait) {
    copy.template copy<true, false>(sK, sV, sRows);
    mma::async_commit();  // group: Q + K0
    copy.template copy<false, true>(sK, sV, sRows);
  } else {
    copy.template copy<true, true>(sK, sV, sRows);
  }
  mma::async_commit();  // group: V0 (or Q + K0 + V0)

  // Per-lane shared-memory addresses of the matrix operands (see mma.h).
  const mma::SmemLane lane_q = mma::lane_q<D>(sQ);
  const mma::SmemLane lane_k = mma::lane_k<D>(sK);
  const mma::SmemLane lane_v = mma::lane_v<D>(sV);

  // Per-slot mask limit: key j is visible to the slot's row iff j <= lim. Rows past the request
  // take the last query's limit so their (discarded) softmax stays finite.
  const int warp = threadIdx.x / rk::kWarpSize;
  const int warp_row0 = warp * 16 * kMT;
  int lim[kMT][kSlots];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int pos = (row0 + warp_row0 + mt * 16 + mma::slot_query(s)) / G;
      lim[mt][s] = min(pos, lq - 1) + prefix;
    }

  Acc o[kMT][kDB];
  float m[kMT][kSlots], l[kMT][kSlots];
  mma::RowSum lsum[kMT];  // kMmaSum: the row sums live here instead of l
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) lsum[mt].x[i] = 0.f;
#pragma unroll
    for (int db = 0; db < kDB; ++db) mma::zero(o[mt][db]);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      m[mt][s] = kNegInf;
      l[mt][s] = 0.f;
    }
  }
  const float c = p.sm_scale * kLog2e;

  auto process = [&](int n, auto masked_tag) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const int buf = n & 1;
    const mma::SmemLane tK = mma::lane_offset(lane_k, buf * C::kKVElems);
    const mma::SmemLane tV = mma::lane_offset(lane_v, buf * C::kKVElems);

    if (kSplitWait) {
      mma::async_wait<1>();  // this thread's K_n copies (and Q) done; V_n may be in flight
      __syncthreads();       // everyone's K_n copies visible; tile n-1 fully consumed
      if (n + 1 < n_kv_tiles)
        copy.template copy<true, false>(sK + (buf ^ 1) * C::kKVElems, nullptr, sRows + (buf ^ 1) * kBN);
      mma::async_commit();
    } else {
      mma::async_wait<0>();  // K_n and V_n (issued a whole tile ago) done
      __syncthreads();       // visible to all; tile n-1 fully consumed
      if (n + 1 < n_kv_tiles)
        copy.template copy<true, true>(sK + (buf ^ 1) * C::kKVElems, sV + (buf ^ 1) * C::kKVElems,
                                       sRows + (buf ^ 1) * kBN);
      mma::async_commit();
      // Tile n's row table is free (its copies were issued before the barrier): tile n + 2.
      if (is_walker && n + 2 < n_kv_tiles) {
        walker.advance(pages, p, lk, step_pages, step_off, kBN);
        sRows[buf * kBN + threadIdx.x] = walker.published(lk);
      }
    }

    // S = Q K^T for this warp's rows.
    Acc s[kMT][kKB];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb) mma::zero(s[mt][kb]);
#pragma unroll kKKUnroll
    for (int kk = 0; kk < kDB; ++kk) {
      Frag qf[kMT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma::load_q<D>(qf[mt], lane_q, warp_row0 + mt * 16, kk * 16);
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb) {
        Frag kf;
        mma::load_k<D>(kf, tK, kb * 16, kk * 16);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma::mma_qk<T>(s[mt][kb], qf[mt], kf);
      }
    }

    // Mask (stage 2 only), running max, rescale. Maxima and sums first run across the key blocks
    // per accumulator element (kAccElems independent chains), then fold the elements of a slot.
    float corr[kMT][kSlots];
    float m_use[kMT][kSlots];
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float t[mma::kAccElems];
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb)
#pragma unroll
        for (int i = 0; i < mma::kAccElems; ++i) {
          if (kMasked) {
            const int key = n * kBN + kb * 16 + mma::acc_other(i);
            if (key > lim[mt][mma::acc_slot(i)]) s[mt][kb].x[i] = kNegInf;
          }
          t[i] = kb == 0 ? s[mt][kb].x[i] : fmaxf(t[i], s[mt][kb].x[i]);
        }
      float mx[kSlots];
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) mx[sl] = kNegInf;
#pragma unroll
      for (int i = 0; i < mma::kAccElems; ++i) mx[mma::acc_slot(i)] = fmaxf(mx[mma::acc_slot(i)], t[i]);
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) {
        const float m_new = fmaxf(m[mt][sl], mma::row_max(mx[sl]));
        m_use[mt][sl] = m_new == kNegInf ? 0.f : m_new * c;
        // Only a grown max rescales (m = -inf -> factor 0); an unchanged one leaves l and O as is.
        corr[mt][sl] = m_new > m[mt][sl] ? fast_exp2(m[mt][sl] * c - m_use[mt][sl]) : 1.f;
        grew |= m_new > m[mt][sl];
        m[mt][sl] = m_new;
      }
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb)
#pragma unroll
        for (int i = 0; i < mma::kAccElems; ++i) {
          const float pv = fast_exp2(fmaf(s[mt][kb].x[i], c, -m_use[mt][mma::acc_slot(i)]));
          s[mt][kb].x[i] = pv;
          t[i] = kb == 0 ? pv : t[i] + pv;
        }
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) {
        if (kMmaSum) {
          mma::rowsum_scale(lsum[mt], sl, corr[mt][sl]);  // P is added during P*V
        } else {
          float sum = 0.f;
#pragma unroll
          for (int i = 0; i < mma::kAccElems; ++i)
            if (mma::acc_slot(i) == sl) sum += t[i];
          l[mt][sl] = fmaf(l[mt][sl], corr[mt][sl], sum);
        }
      }
    }
    // Rescale O only when some row of the warp saw a new max (rare once a row has seen its
    // largest scores, e.g. deep into a long prefix): skipping multiplies by exactly 1.
    if (warp_any(grew)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int db = 0; db < kDB; ++db)
#pragma unroll
          for (int i = 0; i < mma::kAccElems; ++i) o[mt][db].x[i] *= corr[mt][mma::acc_slot(i)];
    }

    if (kSplitWait) {
      mma::async_wait<1>();  // V_n done (K_{n+1} may be in flight)
      __syncthreads();
      if (n + 1 < n_kv_tiles)
        copy.template copy<false, true>(nullptr, sV + (buf ^ 1) * C::kKVElems, sRows + (buf ^ 1) * kBN);
      mma::async_commit();
      // Tile n's row table is free now (K_n, V_n issued long ago): publish tile n + 2 there.
      if (is_walker && n + 2 < n_kv_tiles) {
        walker.advance(pages, p, lk, step_pages, step_off, kBN);
        sRows[buf * kBN + threadIdx.x] = walker.published(lk);
      }
    }

    // O += P V
#pragma unroll
    for (int kb = 0; kb < kKB; ++kb) {
      Frag pf[kMT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma::p_from_acc<T>(pf[mt], s[mt][kb]);
        if (kMmaSum) mma::rowsum_add<T>(lsum[mt], pf[mt]);
      }
#pragma unroll
      for (int db = 0; db < kDB; ++db) {
        Frag vf;
        mma::load_v<D>(vf, tV, kb * 16, db * 16);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma::mma_pv<T>(o[mt][db], pf[mt], vf);
      }
    }
  };

  int n = 0;
  for (; n < n_dense; ++n) process(n, MaskTag<false>{});
  for (; n < n_kv_tiles; ++n) process(n, MaskTag<true>{});
  mma::async_wait<0>();

  // Normalise and store: element pairs (i, i+1) are adjacent dims of one row on every backend.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float inv[kSlots];
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
      const float lt = kMmaSum ? mma::rowsum_get(lsum[mt], sl) : mma::row_sum(l[mt][sl]);
      inv[sl] = lt > 0.f ? 1.f / lt : 0.f;
    }
#pragma unroll
    for (int i = 0; i < mma::kAccElems; i += 2) {
      const int r = warp_row0 + mt * 16 + mma::acc_query(i);
      if (r >= rows_valid) continue;
      const int pr = row0 + r;
      const int pos = pr / G, h = pr - pos * G;
      uint16_t* orow = out + int64_t(q_begin + pos) * p.o_stride_tok + int64_t(kvh * G + h) * p.o_stride_head;
      const float sc = inv[mma::acc_slot(i)];
#pragma unroll
      for (int db = 0; db < kDB; ++db) {
        const int d = db * 16 + mma::acc_other(i);
        *reinterpret_cast<uint32_t*>(orow + d) = mma::pack2<T>(o[mt][db].x[i] * sc, o[mt][db].x[i + 1] * sc);
      }
    }
  }
}

// ----------------------------------------------------------------------------- launch

template <int D>
int grid_x(const ExtendParams& p) {
  // sum_b ceil(L_q[b] * G / kBM) is at most ceil(N_q * G / kBM) + B and at most
  // B * ceil(max_q_len * G / kBM): both known without reading qo_indptr on the host.
  constexpr int kBM = Cfg<D>::kBM;
  const int64_t g = p.num_q_heads / p.num_kv_heads;
  const int64_t a = (int64_t(p.num_q_tokens) * g + kBM - 1) / kBM + p.batch;
  const int64_t b = int64_t(p.batch) * ((int64_t(p.max_q_len) * g + kBM - 1) / kBM);
  const int64_t x = a < b ? a : b;
  if (x > 0x7fffffff) throw LaunchError("radixkv extend_attention: grid too large");
  return int(x);
}

template <class T, int D>
void launch(const ExtendParams& p, Stream stream) {
  using C = Cfg<D>;
  const int gx = grid_x<D>(p);
  if (gx <= 0 || p.num_kv_heads == 0) return;
  auto kernel = extend_attention_kernel<T, D>;
#if RK_AMD
  (void)hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                            hipFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  hipLaunchKernelGGL(kernel, dim3(gx, p.num_kv_heads), dim3(C::kThreads), C::kSmemBytes,
                     static_cast<stream_t>(stream), p);
#else
  (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  kernel<<<dim3(gx, p.num_kv_heads), dim3(C::kThreads), C::kSmemBytes,
           static_cast<stream_t>(stream)>>>(p);
#endif
  const error_t e = last_error();
  if (e != kSuccess)
    throw LaunchError(std::string("radixkv extend_attention launch failed: ") + error_string(e));
}

}  // namespace extend_detail

void launch_extend_attention(const ExtendParams& p, Stream stream) {
  RK_DISPATCH_HEAD_DIM(p.head_dim, kD, [&] {
    RK_DISPATCH_DTYPE(p.dtype, T, [&] { extend_detail::launch<T, kD>(p, stream); });
  });
}

}  // namespace rk
