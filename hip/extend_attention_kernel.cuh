// hip/extend_attention_kernel.cuh -- prefix-prefill ("extend") attention on the paged KV cache:
// the kernel template and its launcher, instantiated by extend_attention.cu (16-bit caches) and
// extend_fp8_e4m3.cu / extend_fp8_e5m2.cu (FP8 caches; one unit each so builds parallelise).
//
//
// A CTA owns one query tile of one KV head. A tile is kBM rows, where a row is a (query position,
// query head of this KV group) pair: every query head that reads KV head h shares the tile, so
// each K/V tile brought into shared memory serves the whole GQA group.
//
// Work order: the grid is normally 1-D in "rank order": CTA x takes the rank-th heaviest tile
// (rank 0 = a request's last query tile, which sees the most keys) of request x / H_kv % B, so
// the heaviest tiles of every request and head are dispatched first and the last wave holds the
// shortest ones. When the batch is so ragged that this grid would be mostly empty CTAs (one long
// request among many short ones), the launcher falls back to request order (grid x = tiles of all
// requests in turn, y = KV head; find_tile maps x to a tile).
//
// Per tile, the keys are walked in kBN-wide tiles, first the dense ones, then the masked ones:
//   1. dense:  key tiles whose every key is visible to every row of the tile (the cached prefix,
//              plus the part of the new tokens left of the tile's first query): no mask math;
//   2. masked: the tiles crossing the diagonal, with j <= i + (L_k - L_q) applied per element.
//   Both run one loop body (a uniform branch skips the mask), and the loops around the copies and
//   stores are not fully unrolled: a short context runs this code once, fetching it cold after
//   whatever ran before evicted it, so its size is part of its time. The loop stops at the tile
//   holding the tile's last visible key, so tiles wholly above the diagonal are never loaded.
//
// K/V tiles are gathered through the page table into double-buffered shared memory. A page
// walker (one thread per key row, state in shared memory) computes each row's address one tile
// ahead; the page-table entry it needs is fetched a tile earlier still (NVIDIA: by cp.async into
// the walker's shared state), so no step waits on a global load. The walker publishes row sources
// in shared memory and every thread issues 16-byte copies (cp.async on NVIDIA) into swizzled rows.
// Rows past L_k (and rows whose page index is outside the pool) are zero-filled, never read
// unmasked, so NaN in padding slots cannot reach a result (p = 0 and V = 0, never NaN * 0).
//
// Online softmax state per query row (per lane slot, see mma.h):
//   m: running max of the raw scores (-inf while empty), l: running sum of exp2((s - m) * c)
//   over this lane's keys (summed across lanes once, at the end), O: running sum of p * V.
//   c = sm_scale * log2(e): scores are scaled inside exp2 only. An empty state (m = -inf)
//   rescales by 0 and subtracts 0, so no inf - inf ever forms. A row keeps its max until a new
//   one exceeds it by more than kRescaleSlack (log2 units; exponentials stay below 2^slack), and O
//   is rescaled only when some row's max moved (a warp vote). The exponentials of a 16-key block
//   are computed right before that block's P*V products, so the compiler can interleave the
//   MUFU/FFMA work of one block with the tensor-core work of the previous one.
//
// Matrix products: mma.sync / MFMA through mma.h everywhere; on sm_90a builds with D = 128 the
// four warps act as one warpgroup and S = Q K^T and O += P V run as wgmma from 128-byte-swizzled
// shared-memory tiles (extend_wgmma.cuh), the tile's two 64-row halves pipelined so that one
// half's softmax overlaps the other half's products. Softmax, masking, paging and the epilogue
// are the same code for both (the per-warp accumulator layouts coincide).
//
// The result is staged through the (by then unused) Q tile so that it leaves in 16-byte stores
// (NVIDIA; AMD stores from the accumulators).
//
// Every choice that differs between targets (tile shape, which copy, product and store paths run)
// is fixed per architecture in ExtendTraits below; there are no other switches. bench/NOTES.md
// ("Extend") records how they were chosen.
#pragma once

#include <type_traits>

#include "extend_attention.h"

#include "dispatch.h"
#include "guard.h"
#include "extend_wgmma.cuh"
#include "mma.h"
#include "platform.h"
#include "softmax.h"

namespace rk {
namespace extend_detail {

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

// A load of the batch's index arrays (which no kernel writes while it runs) issued where it
// stands: the compiler would otherwise sink a load whose value is used only after an early exit
// below that exit, turning independent loads into a chain. The non-coherent path keeps the line
// in L1, so a CTA's other warps loading the same words do not each go to L2.
RK_DEVICE int load_early_ro(const int32_t* ptr) {
#if RK_NVIDIA
  int v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(ptr));
  return v;
#else
  return *ptr;
#endif
}

// A row's (query position, head of the group) advanced by `rows` rows (row = position * G + head),
// without a division.
RK_DEVICE void advance_row(int& pos, int& h, int rows, int G) {
  h += rows;
  while (h >= G) {
    h -= G;
    ++pos;
  }
}

// Order shared-memory accesses among the lanes of one warp (a wavefront runs in lockstep on AMD).
RK_DEVICE void warp_sync() {
#if RK_AMD
  __builtin_amdgcn_wave_barrier();
#else
  __syncwarp();
#endif
}

// ----------------------------------------------------------------------------- per-architecture choices

// The target of this compile pass. The host pass of an NVIDIA build sees Nvidia; it uses only the
// tile shape (grid, block and shared-memory sizes), which Sm90a shares.
namespace arch {
struct Amd {};     // gfx9 wave64: MFMA (gfx90a, gfx94x) or the FMA fallback (gfx906); 64 KB of LDS
struct Nvidia {};  // sm_80+: mma.sync, ldmatrix, cp.async
struct Sm90a {};   // Hopper's arch-specific target: Nvidia plus wgmma
#if RK_AMD
using Current = Amd;
#elif RK_HAS_WGMMA
using Current = Sm90a;
#else
using Current = Nvidia;
#endif
}  // namespace arch

// Shared by every target.
struct ExtendCommon {
  static constexpr int kMinBlocks = 1;          // __launch_bounds__ minimum CTAs per SM / CU
  static constexpr int kQkUnroll = 8;           // head-dim steps of S = Q K^T unrolled (all of D <= 128)
  static constexpr float kRescaleSlack = 8.f;   // log2 units a row's max may be exceeded by (lazy rescale)
};

// kWarps warps; each owns kMT blocks of 16 rows; keys move in tiles of kBN. kPtAsync: the walker's
// page-table entries arrive by cp.async, which also lets the prologue fetch tiles 0 and 1's entries
// in one round trip. kOSmem: the result leaves through shared memory in 16-byte stores. kWgmma:
// S and P*V on wgmma (extend_wgmma.cuh).
template <class Arch, int D>
struct ExtendTraits;

// AMD: small tiles (gfx90a has 64 KB of LDS). D = 128 takes 16-key tiles like D = 256: with 32 the
// bf16 kernel needs more than gfx906's 256 VGPRs and spills to scratch (hip/isa_report.py).
template <int D>
struct AmdTiling;
template <> struct AmdTiling<64> { static constexpr int kWarps = 4, kMT = 1, kBN = 32; };
template <> struct AmdTiling<128> { static constexpr int kWarps = 4, kMT = 1, kBN = 16; };
template <> struct AmdTiling<256> { static constexpr int kWarps = 2, kMT = 1, kBN = 16; };
template <int D>
struct ExtendTraits<arch::Amd, D> : ExtendCommon, AmdTiling<D> {
  static constexpr bool kPtAsync = false, kOSmem = false, kWgmma = false;
};

// NVIDIA: 32 rows per warp (kMT = 2) halve shared-memory traffic per FLOP.
template <int D>
struct NvTiling;
template <> struct NvTiling<64> { static constexpr int kWarps = 4, kMT = 2, kBN = 64; };
template <> struct NvTiling<128> { static constexpr int kWarps = 4, kMT = 2, kBN = 64; };
template <> struct NvTiling<256> { static constexpr int kWarps = 4, kMT = 1, kBN = 32; };
template <int D>
struct ExtendTraits<arch::Nvidia, D> : ExtendCommon, NvTiling<D> {
  static constexpr bool kPtAsync = true, kOSmem = true, kWgmma = false;
};
// sm_90a: the NVIDIA choices, with wgmma where its tile shape fits (D = 128; Cfg checks the shape).
template <int D>
struct ExtendTraits<arch::Sm90a, D> : ExtendTraits<arch::Nvidia, D> {
  static constexpr bool kWgmma = D == 128;
};

template <int D>
using Traits = ExtendTraits<arch::Current, D>;

template <int D>
struct Cfg : Traits<D> {
  using Tr = Traits<D>;
  static constexpr int kBM = Tr::kWarps * 16 * Tr::kMT;  // rows per tile
  static constexpr int kThreads = Tr::kWarps * rk::kWarpSize;
  static constexpr int kChunks = D / 8;           // 16-byte chunks per row
  static constexpr int kQElems = kBM * D;
  // K/V buffers hold kBN rows of kRowElems elements; the swizzled tiles fill the first kBN * D
  // elements of each. NVIDIA allots D + 8 per row: that footprint (and with it the shared-memory
  // carve-out and CTAs per SM) is part of the tuned configuration.
#if RK_NVIDIA
  static constexpr int kRowElems = D + 8;
#else
  static constexpr int kRowElems = D;
#endif
  static constexpr int kKVElems = Tr::kBN * kRowElems;  // one K or V buffer
  // Byte offsets: Q tile, K[2], V[2], row table int4 [2][kBN], walker state int4 [kBN], mask
  // limits int4 [kThreads], the walker's per-CTA constants (WalkInfo). What is only needed now
  // and then lives in shared memory rather than in registers across the loop.
  static constexpr int kOffK = kQElems * 2;
  static constexpr int kOffV = kOffK + 2 * kKVElems * 2;
  static constexpr int kOffRows = kOffV + 2 * kKVElems * 2;
  static constexpr int kOffWalk = kOffRows + 2 * Tr::kBN * 16;
  static constexpr int kOffLim = kOffWalk + Tr::kBN * 16;
  static constexpr int kOffInfo = kOffLim + kThreads * 16;
  // + slack to align the base to 1024 bytes (the 128-byte swizzle pattern of wgmma operands).
  static constexpr int kSmemBytes = kOffInfo + 64 + 1024;
  static_assert(Tr::kMT * mma::kRowSlots <= 4, "mask limits fit one int4 per thread");
  static_assert(Tr::kBN <= kThreads, "one walker thread per key row");
  static_assert((kKVElems * 2) % 128 == 0 && kOffK % 128 == 0, "buffers stay 128-byte aligned");
  // The wgmma path: one warpgroup, two 64-row halves, 64-key tiles, K/V buffers 1024-byte aligned.
  static_assert(!Tr::kWgmma || (D == 128 && Tr::kWarps == 4 && Tr::kMT == 2 && Tr::kBN == 64 &&
                                (kKVElems * 2) % 1024 == 0 && kOffK % 1024 == 0),
                "the wgmma path's tile shape");
};

// Shared-memory element index of (row, col) in a [kRows][D] Q/K/V tile: mma.h's XOR-swizzled rows,
// or the 128-byte-swizzle column halves that wgmma descriptors address.
template <int D, int kRows, bool kSw128>
RK_DEVICE int tile_index(int row, int col) {
  if constexpr (kSw128) {
    return wgmma::sw128_index<kRows>(row, col);
  } else {
    return mma::smem_index<D>(row, col);
  }
}

// ----------------------------------------------------------------------------- tile lookup

// Request order: map x to (request, tile of that request). Tiles are numbered request by request;
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

// Rank order: (request, rank) of the t-th (request, rank) slot. Without a plan, slot t is rank
// t / B of request t % B (every request's heaviest tile first); with one, it is plan entry t. False:
// the entry names no request (recorded; the CTA has nothing to do).
RK_DEVICE bool plan_entry(const ExtendParams& p, int t, int& req, int& rank) {
  if (p.tile_plan == nullptr) {
    rank = t / p.batch;
    req = t - rank * p.batch;
    return true;
  }
  const int2 e = *reinterpret_cast<const int2*>(p.tile_plan + 2 * int64_t(t));
  req = e.x;
  rank = e.y;
  if (static_cast<unsigned>(req) < static_cast<unsigned>(p.batch) && rank >= 0) return true;
  guard::report_extra(p.status, guard::kExtendPlan);
  return false;
}

// Whether a request of n_tiles query tiles has a tile of this rank. Rank order's grid holds slots
// for requests shorter than the longest (no tile: the CTA exits); a plan entry must name a tile.
RK_DEVICE bool rank_in_request(const ExtendParams& p, int rank, int n_tiles) {
  if (rank < n_tiles) return true;
  if (p.tile_plan != nullptr) guard::report_extra(p.status, guard::kExtendPlan);
  return false;
}

// ----------------------------------------------------------------------------- page walker

// Per-request page-table view: CSR row or block-table row, with the number of pages it may hold.
struct PageRow {
  const int32_t* pages;
  int cols;  // entries that may be read (block-table mode: max_blocks; CSR: the row clamped to kv_indices)
};

// What a CTA needs of its request once the request, the tile and L_q are known: the request's
// rows in q, L_k and its page-table row clamped to what exists (guard.h; check_extend_batch
// records the faults), the tile's first packed row and how many of its rows are real.
// False: the request's rows are not inside q (the CTA has nothing to do).
struct TileSpan {
  int q_begin, lk, row0, rows_valid, prefix;  // prefix = L_k - L_q (< 0: no valid mask)
  PageRow pages;
};
// A request's metadata: qo_indptr[b], [b + 1], kv_lens[b], and kv_indptr[b], [b + 1] (0 without
// kv_indptr).
struct ReqMeta {
  int q0, q1, lk, k0, k1;
};
// All five in one round trip (load_early_ro: none waits behind the branches that use another).
RK_DEVICE ReqMeta load_req_meta(const ExtendParams& p, int req) {
  ReqMeta m;
  m.q0 = load_early_ro(p.qo_indptr + req);
  m.q1 = load_early_ro(p.qo_indptr + req + 1);
  m.lk = load_early_ro(p.kv_lens + req);
  m.k0 = m.k1 = 0;
  if (p.kv_indptr != nullptr) {
    m.k0 = load_early_ro(p.kv_indptr + req);
    m.k1 = load_early_ro(p.kv_indptr + req + 1);
  }
  return m;
}
template <int kBM>
RK_DEVICE bool tile_span(const ExtendParams& p, int G, int req, const ReqMeta& m, int tile, TileSpan& t) {
  const int lq = m.q1 - m.q0;
  t.q_begin = m.q0;
  int kv_cols = p.table_cols, kv_start = 0;
  uint32_t seen = 0;
  if (t.q_begin < 0 || lq < 0 || t.q_begin > p.num_q_tokens - lq) return false;
  if (p.kv_indptr != nullptr) {
    const guard::Row row = guard::csr_clamp(m.k0, m.k1, p.table_len, seen);
    kv_start = row.begin;
    kv_cols = row.count;
  }
  t.lk = guard::clamp_len(m.lk, kv_cols, p.page_size, seen);
  t.row0 = tile * kBM;
  t.rows_valid = min(kBM, lq * G - t.row0);
  t.prefix = t.lk - lq;
  if (p.kv_indptr == nullptr) {
    t.pages.pages = p.page_table + int64_t(req) * p.table_stride;
    t.pages.cols = p.table_cols;
  } else {
    t.pages.pages = p.page_table + kv_start;
    t.pages.cols = kv_cols;
  }
  return true;
}
// More queries than keys (prefix < 0): no valid mask exists. The tile's output rows get NaN
// rather than garbage (the Python wrapper rejects such input before launching when it can read
// the lengths). Written by kThreads threads, this one being thread `tid` of them.
template <class T, int D, int kThreads>
RK_DEVICE void write_nan_rows(const ExtendParams& p, int G, int kvh, const TileSpan& t, int tid) {
  uint16_t* out = static_cast<uint16_t*>(p.out);
  const uint32_t nan2 = mma::pack2<T>(__int_as_float(0x7fc00000), __int_as_float(0x7fc00000));
  for (int idx = tid; idx < t.rows_valid * (D / 2); idx += kThreads) {
    const int r = t.row0 + idx / (D / 2), d = 2 * (idx % (D / 2));
    const int pos = r / G, h = r % G;
    *reinterpret_cast<uint32_t*>(out + int64_t(t.q_begin + pos) * p.o_stride_tok + int64_t(kvh * G + h) * p.o_stride_head +
                                 d) = nan2;
  }
}

// Walker of key row r: tracks key j = t * kBN + r of the next tile t to hand out as (logical page
// pidx, offset off) plus that page's table entry `raw`, loaded one step early. Each step moves kBN
// keys forward by a constant (pages, offset) increment: no division in the loop. The state lives
// in shared memory between steps (one int4 per walker), so it costs no registers in the loop.
struct WalkStep {
  int pidx, off;  // logical page and offset of this thread's key row in the next tile
  int raw;        // page-table entry of pidx (-1: none)
};

RK_DEVICE int fetch_page(const PageRow& row, int pidx, int key, int lk) {
  return key < lk && pidx < row.cols ? row.pages[pidx] : -1;
}

// The walker's per-CTA constants (in shared memory: read only when a walker steps).
struct WalkInfo {
  PageRow row;
  int64_t k_head;  // byte address of this KV head's K element (page 0, slot 0, dim 0)
  int lk;          // L_k of the request
  int step_pages;  // a tile of kBN keys = step_pages pages + step_off slots
  int step_off;
};

// Where K row `key` of the tile being handed out comes from (its V row is at the same offset
// from v_cache): its byte address and 16 (bytes per 16-byte copy), or, for a row to zero-fill
// (past L_k, or a page index outside the pool), an aligned address that is not read and 0.
struct RowSrc {
  int64_t addr;
  int bytes;
};
// kEB: bytes per cache element (2, or 1 for FP8 caches).
template <int kEB>
RK_DEVICE RowSrc row_source(int4 w, const WalkInfo& in, const ExtendParams& p, int key) {
  const bool valid = key < in.lk && w.z >= 0 && w.z < p.num_pages;
  if (key < in.lk && !valid) guard::report(p.status, guard::kExtend, guard::kPageRange);
  return RowSrc{valid ? in.k_head + kEB * (int64_t(w.z) * p.kv_stride_page + int64_t(w.y) * p.kv_stride_slot)
                      : in.k_head,
                valid ? 16 : 0};
}
// (page, offset) of the walker's key row one tile (kBN keys) further.
RK_DEVICE void advance(int4& w, const WalkInfo& in, const ExtendParams& p) {
  w.x += in.step_pages;
  w.y += in.step_off;
  if (w.y >= p.page_size) {
    w.y -= p.page_size;
    ++w.x;
  }
}

// One walker step: the row source of `key`, then the state moved one tile on with the next page
// entry. kAsyncFetch (NVIDIA, kPtAsync): that entry goes to the state's z by a 4-byte cp.async,
// committed as its own group; the caller's next cp.async wait (the one before the barrier of the
// next tile, or an explicit one) makes it visible. A plainly loaded entry would stall the walker
// warps on that load in every step, in front of the other warps' products; at page size 1 each
// step reads kBN * 4 new bytes of the table, mostly L1 misses.
template <bool kAsyncFetch, int kEB>
RK_DEVICE RowSrc walk_from(int4 w, const WalkInfo& in, int4* state, const ExtendParams& p, int key,
                           int step_keys) {
  const RowSrc e = row_source<kEB>(w, in, p, key);
  advance(w, in, p);
#if RK_NVIDIA
  if constexpr (kAsyncFetch) {
    *reinterpret_cast<int2*>(state) = make_int2(w.x, w.y);
    const int next = key + step_keys;
    if (next < in.lk && w.x < in.row.cols) {
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(&state->z));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(in.row.pages + w.x)
                   : "memory");
    } else {
      state->z = -1;
    }
    mma::async_commit();
    return e;
  }
#endif
  w.z = fetch_page(in.row, w.x, key + step_keys, in.lk);
  *state = w;
  return e;
}
template <bool kAsyncFetch, int kEB>
RK_DEVICE RowSrc walk(int4* state, const WalkInfo* info, const ExtendParams& p, int key, int step_keys) {
  return walk_from<kAsyncFetch, kEB>(*state, *info, state, p, key, step_keys);
}

// 16-byte copies of [kBN][D] key/value tiles (swizzled rows): thread t moves chunk t % (D/8) of
// rows t / (D/8) + i * step. Row sources come from the walker's table, one int4 per row
// {address lo, address hi, source bytes 16 or 0, -}: one shared load, no compare, per row. A V
// row sits v_minus_k bytes from its K row.
template <int D, int kBN, int kThreads, bool kSw128>
struct TileCopy {
  static constexpr int kChunks = D / 8;
  static constexpr int kPasses = kBN * kChunks / kThreads;
  static constexpr int kRowStep = kThreads / kChunks;
  static_assert((kBN * kChunks) % kThreads == 0 && kThreads % kChunks == 0, "whole copy passes");

  RK_DEVICE static int4 entry(const RowSrc& e) {
    return make_int4(int(uint32_t(uint64_t(e.addr))), int(uint32_t(uint64_t(e.addr) >> 32)), e.bytes, 0);
  }
  RK_DEVICE static void copy(uint16_t* dk, uint16_t* dv, const int4* rows, int64_t v_minus_k) {
    const int r0 = threadIdx.x / kChunks;
    const int c8 = (threadIdx.x % kChunks) * 8;
    const int dst0 = tile_index<D, kBN, kSw128>(r0, c8);
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int4 rw = rows[r0 + it * kRowStep];
      const uint64_t a = (uint64_t(uint32_t(rw.y)) << 32) | uint32_t(rw.x);
      const char* ks = reinterpret_cast<const char*>(a) + c8 * 2;
      // Rows 8 apart share their swizzle (either layout): a constant step then.
      const int dst = kRowStep % 8 == 0 ? dst0 + tile_index<D, kBN, kSw128>(it * kRowStep, 0)
                                        : tile_index<D, kBN, kSw128>(r0 + it * kRowStep, c8);
      mma::async_copy16_bytes(dk + dst, ks, rw.z);
      mma::async_copy16_bytes(dv + dst, ks + v_minus_k, rw.z);
    }
  }
};

// ----------------------------------------------------------------------------- FP8 caches

// FP8 element -> q's 16-bit type T, exactly (every e4m3 / e5m2 value is an fp16 and a bf16 value).
// kUnit: the factor the result leaves out, folded into the K and V scales (1: none).
//   fp16: platform.h's bit placement (e4m3 lands as value x 2^-8, so kUnit = 256).
//   bf16 on NVIDIA: the 7 exponent/mantissa bits placed under bf16's, which gives value x 2^-120
//     (e4m3) or x 2^-112 (e5m2), subnormals included, then one exact bf16x2 multiply by the power
//     of two (bf16 arithmetic keeps subnormals), so the products see the values themselves.
//   bf16 elsewhere: through fp16 and fp32 (exact), with fp16's kUnit.
// KV head kvh's scale of `scales` (p.scales.k or .v): NaN when it is not finite and positive
// (fp8_checked_scale), so a bad scale makes the output NaN.
RK_DEVICE float extend_head_scale(const ExtendParams& p, const float* scales, int kvh) {
  return fp8_checked_scale(scales[kvh * p.scales.stride]);
}

#if RK_NVIDIA
constexpr bool kBf16Fma = true;  // bf16x2 fma (sm_80+) for the bf16 conversion
#else
constexpr bool kBf16Fma = false;
#endif
template <class T, class KV>
struct Fp8To16 {
  static constexpr bool kBf16Bits = kBf16Fma && std::is_same<T, bf16_t>::value;
  static constexpr float kUnit = kBf16Bits ? 1.f : Fp8Unit<KV>::value;
  // Bytes b0..b3 of w -> 16-bit pairs lo = (b1:b0), hi = (b3:b2).
  RK_DEVICE static void word(uint32_t w, uint32_t& lo, uint32_t& hi) {
    if constexpr (kBf16Bits) {
#if RK_NVIDIA
      constexpr bool kE4 = Fp8Unit<KV>::kShifted;
      constexpr uint32_t kMask = kE4 ? 0x07f007f0u : 0x0fe00fe0u;
      constexpr int kShift = kE4 ? 4 : 3;
      constexpr uint32_t kPow = kE4 ? 0x7b807b80u : 0x77807780u;  // 2^120 / 2^112 in bf16x2
      // a = (b1 << 24) | (b0 << 8), b = (b3 << 24) | (b2 << 8): one byte permute each.
      const uint32_t a = __byte_perm(w, 0u, 0x1404u);
      const uint32_t b = __byte_perm(w, 0u, 0x3424u);
      const uint32_t la = (a & 0x80008000u) | ((a >> kShift) & kMask);
      const uint32_t hb = (b & 0x80008000u) | ((b >> kShift) & kMask);
      // x * 2^k + (-0): exact, and keeps the sign of a zero.
      asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(lo) : "r"(la), "r"(kPow), "r"(0x80008000u));
      asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(hi) : "r"(hb), "r"(kPow), "r"(0x80008000u));
#endif
    } else {
      fp8x4_to_f16x4<KV>(w, lo, hi);
      if constexpr (std::is_same<T, bf16_t>::value) {
        float f0, f1;
        Convert<f16_t>::unpack2(lo, f0, f1);
        lo = Convert<bf16_t>::pack2(f0, f1);
        Convert<f16_t>::unpack2(hi, f0, f1);
        hi = Convert<bf16_t>::pack2(f0, f1);
      }
    }
  }
  // 8 elements (two words) -> one 16-byte vector of T.
  RK_DEVICE static void x8(uint2 raw, vec16& out) {
    word(raw.x, out.w[0], out.w[1]);
    word(raw.y, out.w[2], out.w[3]);
  }
  // The factor a K or V scale of `p.scales` enters the kernel with for KV head kvh: the
  // scale (extend_head_scale) times the unit the conversion left out.
  RK_DEVICE static float scale_factor(const ExtendParams& p, const float* scales, int kvh) {
    return extend_head_scale(p, scales, kvh) * kUnit;
  }
};

// FP8 caches: the page walker hands out the same row sources (byte addresses of 1-byte rows), and
// the rows' raw bytes go by 16-byte copies (cp.async on NVIDIA) into a byte stage; once they have
// landed, the CTA converts the stage into the one 16-bit tile the products read, in the layout the
// 16-bit path copies into. Two stages of kBN * D bytes each fit in the second 16-bit buffer of K
// (and of V), so the shared-memory footprint is the 16-bit kernel's: tile n + 1's bytes are in
// flight while tile n is converted and multiplied.
template <class T, class KV, int D, int kBN, int kThreads, bool kSw128>
struct Fp8TileCopy {
  static constexpr int kChunks = D / 16;  // 16-byte chunks per FP8 row
  static constexpr int kTotal = kBN * kChunks;
  static constexpr int kPasses = (kTotal + kThreads - 1) / kThreads;
  static constexpr int kStageBytes = kBN * D;

  // Not unrolled, like convert below: both run with the accumulators live (an unrolled loop
  // spills registers in the sm_90a wgmma kernel).
  RK_DEVICE static void copy(uint8_t* dk, uint8_t* dv, const int4* rows, int64_t v_minus_k) {
#pragma unroll 1
    for (int it = 0; it < kPasses; ++it) {
      const int idx = int(threadIdx.x) + it * kThreads;
      if (kTotal % kThreads == 0 || idx < kTotal) {
        const int r = idx / kChunks, c16 = (idx % kChunks) * 16;
        const int4 rw = rows[r];
        const uint64_t a = (uint64_t(uint32_t(rw.y)) << 32) | uint32_t(rw.x);
        const char* ks = reinterpret_cast<const char*>(a) + c16;
        mma::async_copy16_bytes(dk + r * D + c16, ks, rw.z);
        mma::async_copy16_bytes(dv + r * D + c16, ks + v_minus_k, rw.z);
      }
    }
  }
  // 8 elements (half a 16-byte chunk) at a time, in a loop that is not unrolled: it runs with
  // the accumulators live, so few registers are left for it.
  static constexpr int kHalves = kBN * D / 8;
  RK_DEVICE static void convert_half(uint16_t* dst, const uint8_t* src, int idx) {
    const int r = idx / (D / 8), c8 = (idx % (D / 8)) * 8;
    vec16 out;
    Fp8To16<T, KV>::x8(*reinterpret_cast<const uint2*>(src + r * D + c8), out);
    store16(dst + tile_index<D, kBN, kSw128>(r, c8), out);
  }
  // The stages (K, V) -> the 16-bit tiles; the caller's barrier makes them visible.
  RK_DEVICE static void convert(uint16_t* tk, uint16_t* tv, const uint8_t* sk, const uint8_t* sv) {
#pragma unroll 1
    for (int idx = threadIdx.x; idx < kHalves; idx += kThreads) {
      convert_half(tk, sk, idx);
      convert_half(tv, sv, idx);
    }
  }
};

// ----------------------------------------------------------------------------- the kernel

// KV: the cache element type, T (16-bit caches) or an FP8 type (Fp8TileCopy).
template <class T, class KV, int D, bool kRankOrder>
__global__ void __launch_bounds__(Cfg<D>::kThreads, Cfg<D>::kMinBlocks)
extend_attention_kernel(const ExtendParams p) {
  using C = Cfg<D>;
  constexpr int kMT = C::kMT, kBN = C::kBN, kBM = C::kBM, kThreads = C::kThreads;
  constexpr int kKB = kBN / 16;  // 16-key blocks per key tile
  constexpr int kDB = D / 16;    // 16-wide blocks along head_dim
  constexpr int kSlots = mma::kRowSlots;
  constexpr bool kWgmma = C::kWgmma;
  constexpr bool kPtAsync = C::kPtAsync;
  using Copy = TileCopy<D, kBN, kThreads, kWgmma>;
  constexpr bool kFp8 = IsFp8<KV>::value;
  constexpr int kEB = kFp8 ? 1 : 2;  // bytes per cache element
  using Fp8Copy = Fp8TileCopy<T, KV, D, kBN, kThreads, kWgmma>;
  // Rows of this warp: blocks of 16 at warp_row0 + mt * kMStride (mma.sync: the warp's own 16 * kMT
  // consecutive rows; wgmma: rows 16w.. of each 64-row half).
  constexpr int kMStride = kWgmma ? 64 : 16;

  extern __shared__ __align__(128) uint4 smem_raw[];  // 128-byte aligned tiles (mma.h)
  char* smem = reinterpret_cast<char*>(smem_raw);
#if RK_NVIDIA
  // wgmma operands: 128-byte swizzle pattern anchored at 1024-byte boundaries (kSmemBytes has the
  // slack). The other paths keep the compile-time base (cheaper addressing).
  if (kWgmma) smem += (1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023;
#endif
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + C::kOffK);  // [2][kBN][kRowElems]
  uint16_t* sV = reinterpret_cast<uint16_t*>(smem + C::kOffV);  // [2][kBN][kRowElems]
  int4* sRows = reinterpret_cast<int4*>(smem + C::kOffRows);         // [2][kBN]
  int4* sWalk = reinterpret_cast<int4*>(smem + C::kOffWalk);         // [kBN]
  int* sLim = reinterpret_cast<int*>(smem + C::kOffLim);             // [kThreads][4]
  WalkInfo* sInfo = reinterpret_cast<WalkInfo*>(smem + C::kOffInfo);
  // FP8: byte stage s of K / V in the second 16-bit buffer (Fp8TileCopy); the first is the tile.
  auto stage_k = [&](int s) { return reinterpret_cast<uint8_t*>(sK + C::kKVElems) + s * Fp8Copy::kStageBytes; };
  auto stage_v = [&](int s) { return reinterpret_cast<uint8_t*>(sV + C::kKVElems) + s * Fp8Copy::kStageBytes; };
  static_assert(!kFp8 || 2 * Fp8Copy::kStageBytes <= C::kKVElems * 2, "two FP8 stages fit a 16-bit buffer");

  const int G = p.num_q_heads / p.num_kv_heads;
  // Records, never stops.
  if (blockIdx.x == 0 && blockIdx.y == 0) guard::check_extend_batch(p, guard::kRanExtend, kBM);
  // Fast prologue (where page entries go by cp.async): the walkers fetch tiles 0 and 1's page
  // entries together, so the first K/V copy waits on three dependent global round trips (the
  // request's metadata, page entries, K/V) instead of four.
  constexpr bool kFastPrologue = kPtAsync;
  int req, kvh, tile;
  ReqMeta meta;  // the request's five metadata words, loaded in one round trip
  if (kRankOrder) {
    const int lin = blockIdx.x;
    kvh = lin % p.num_kv_heads;
    const int t = lin / p.num_kv_heads;
    int rank;
    if (!plan_entry(p, t, req, rank)) return;
    meta = load_req_meta(p, req);  // req < batch: in bounds
    const int n_tiles_req = ((meta.q1 - meta.q0) * G + kBM - 1) / kBM;
    if (!rank_in_request(p, rank, n_tiles_req)) return;
    tile = n_tiles_req - 1 - rank;
  } else {
    int tile_in_req;
    if (!find_tile<kBM>(p, G, blockIdx.x, req, tile_in_req)) return;  // surplus CTA
    kvh = blockIdx.y;
    meta = load_req_meta(p, req);
    const int n_tiles_req = ((meta.q1 - meta.q0) * G + kBM - 1) / kBM;
    tile = n_tiles_req - 1 - tile_in_req;  // later tiles see more keys: run them first
  }
  TileSpan span;
  if (!tile_span<kBM>(p, G, req, meta, tile, span)) return;
  if (span.prefix < 0) {
    write_nan_rows<T, D, kThreads>(p, G, kvh, span, threadIdx.x);
    return;
  }
  const int lq = meta.q1 - meta.q0;
  const int q_begin = span.q_begin, row0 = span.row0, rows_valid = span.rows_valid, prefix = span.prefix;
  const int lk = span.lk;
  const PageRow pages = span.pages;
  const uint16_t* q = static_cast<const uint16_t*>(p.q);
  uint16_t* out = static_cast<uint16_t*>(p.out);

  const int pos_first = row0 / G;
  const int pos_last = (row0 + rows_valid - 1) / G;
  const int keys_needed = pos_last + prefix + 1;           // <= lk
  const int n_kv_tiles = (keys_needed + kBN - 1) / kBN;
  const int n_dense = (pos_first + prefix + 1) / kBN;      // tiles visible to every row

  // Page walker: thread r < kBN owns key row r.
  const bool is_walker = threadIdx.x < kBN;
  int4* my_walk = sWalk + (is_walker ? threadIdx.x : 0);
  const int step_pages = kBN / p.page_size;
  const WalkInfo info{pages,
                      int64_t(reinterpret_cast<uintptr_t>(p.k_cache)) + kEB * int64_t(kvh) * p.kv_stride_head,
                      lk, step_pages, kBN - step_pages * p.page_size};
  if (threadIdx.x == 0) *sInfo = info;
  const int64_t v_minus_k =
      int64_t(reinterpret_cast<uintptr_t>(p.v_cache)) - int64_t(reinterpret_cast<uintptr_t>(p.k_cache));
  int4 w0 = make_int4(0, 0, -1, 0), w1 = w0;  // fast prologue: walker state at tiles 0 and 1
  if (is_walker) {
    const int r = threadIdx.x;
    const int pidx = r / p.page_size;
    w0 = make_int4(pidx, r - pidx * p.page_size, fetch_page(pages, pidx, r, lk), 0);
    if (kFastPrologue) {
      // Both entries in flight at once.
      w1 = w0;
      advance(w1, info, p);
      w1.z = fetch_page(pages, w1.x, r + kBN, lk);
    } else {
      *my_walk = w0;
    }
  }
  // Hand tile t's row of this walker to the copy path (walker threads only, t in order 0, 1, ...;
  // after the first barrier, which publishes sInfo).
  auto walk_tile = [&](int t) {
    return walk<kPtAsync, kEB>(my_walk, sInfo, p, t * kBN + int(threadIdx.x), kBN);
  };

  if (kFastPrologue) {
    // Rows of tiles 0 and 1 from the entries in registers; tile 2's entry goes by cp.async
    // (the loop's first wait makes it visible). sInfo is first read after the barrier below.
    if (is_walker) {
      sRows[threadIdx.x] = Copy::entry(row_source<kEB>(w0, info, p, int(threadIdx.x)));
      sRows[kBN + threadIdx.x] =
          Copy::entry(walk_from<kPtAsync, kEB>(w1, info, my_walk, p, kBN + int(threadIdx.x), kBN));
    }
  } else {
    __syncthreads();  // sInfo visible
    if (is_walker) {  // entries loaded plainly (no kPtAsync): tile 1's is in the walker's state
      sRows[threadIdx.x] = Copy::entry(walk_tile(0));
      sRows[kBN + threadIdx.x] = Copy::entry(walk_tile(1));
    }
  }
  __syncthreads();  // sRows[0] visible
  // K/V tile 0 leaves before the Q tile: the Q copies (kBM rows) take a while to issue, and tile
  // 0's copies issued behind them would land that much later.
  if constexpr (kFp8) {
    Fp8Copy::copy(stage_k(0), stage_v(0), sRows, v_minus_k);
  } else {
    Copy::copy(sK, sV, sRows, v_minus_k);
  }
  mma::async_commit();

  // Q tile: row r is (position (row0 + r) / G, head kvh * G + (row0 + r) % G); rows past the
  // request are zero-filled (their results are never stored). Thread t copies chunk t % kChunks
  // of rows t / kChunks + i * kQStep, its (position, head) advanced without a division, in a loop
  // that is not unrolled (a short context fetches this code cold). The first loop step's wait
  // covers these copies with tile 0's.
  {
    constexpr int kQStep = kThreads / C::kChunks;
    static_assert(kThreads % C::kChunks == 0 && kBM % kQStep == 0, "whole Q rows per pass");
    const int c = threadIdx.x % C::kChunks;
    int r = threadIdx.x / C::kChunks;
    int pos = (row0 + r) / G, h = (row0 + r) - pos * G;
#pragma unroll 1
    for (; r < kBM; r += kQStep) {
      const bool valid = r < rows_valid;
      const uint16_t* src =
          q + (valid ? int64_t(q_begin + pos) * p.q_stride_tok + int64_t(kvh * G + h) * p.q_stride_head
                     : 0) + c * 8;
      mma::async_copy16(sQ + tile_index<D, kBM, kWgmma>(r, c * 8), src, valid);
      advance_row(pos, h, kQStep, G);
    }
  }
  mma::async_commit();

  // Per-lane shared-memory addresses of the matrix operands (see mma.h).
  const mma::SmemLane lane_q = mma::lane_q<D>(sQ);
  const mma::SmemLane lane_k = mma::lane_k<D>(sK);
  const mma::SmemLane lane_v = mma::lane_v<D>(sV);

  // Per-slot mask limit: key j is visible to the slot's row iff j <= lim. Rows past the request
  // take the last query's limit so their (discarded) softmax stays finite.
  const int warp = threadIdx.x / rk::kWarpSize;
  const int warp_row0 = warp * 16 * (kWgmma ? 1 : kMT);
  // Kept in shared memory (this thread's int4) and read only by masked tiles.
  {
    int lim[4] = {0, 0, 0, 0};
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int pos = (row0 + warp_row0 + mt * kMStride + mma::slot_query(s)) / G;
        lim[mt * kSlots + s] = min(pos, lq - 1) + prefix;
      }
    reinterpret_cast<int4*>(sLim)[threadIdx.x] = make_int4(lim[0], lim[1], lim[2], lim[3]);
  }

  Acc o[kMT][kDB];
  float m[kMT][kSlots], l[kMT][kSlots];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int db = 0; db < kDB; ++db) mma::zero(o[mt][db]);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      m[mt][s] = kNegInf;
      l[mt][s] = 0.f;
    }
  }
  // FP8: the K scale (and the conversion's unit) joins the softmax scale, the V scale the
  // output normalisation. A bad scale is NaN here (fp8_checked_scale), so the output is NaN.
  float c = p.sm_scale * kLog2e;
  if constexpr (kFp8)
    c *= Fp8To16<T, KV>::scale_factor(p, p.scales.k, kvh);

  // One body for dense and masked tiles (`masked` is uniform across the CTA): a second copy of
  // the body would be more code to fetch, and a short context fetches its code cold.
  auto process = [&](int n, bool masked) {
    const int buf = kFp8 ? 0 : n & 1;  // FP8: one 16-bit tile, converted from stage n & 1
    const int rbuf = n & 1;            // row table (and FP8 stage) of tile n
    const mma::SmemLane tK = mma::lane_offset(lane_k, buf * C::kKVElems);
    const mma::SmemLane tV = mma::lane_offset(lane_v, buf * C::kKVElems);

    mma::async_wait<0>();  // K_n and V_n (issued a whole tile ago) done
#if RK_HAS_WGMMA
    if (kWgmma && !kFp8) wgmma::fence_proxy_async();  // ... and visible to the tensor cores' reads
#endif
    __syncthreads();       // visible to all; tile n-1 fully consumed
    if (n + 1 < n_kv_tiles) {
      if constexpr (kFp8) {
        Fp8Copy::copy(stage_k(rbuf ^ 1), stage_v(rbuf ^ 1), sRows + (rbuf ^ 1) * kBN, v_minus_k);
      } else {
        Copy::copy(sK + (buf ^ 1) * C::kKVElems, sV + (buf ^ 1) * C::kKVElems, sRows + (buf ^ 1) * kBN,
                   v_minus_k);
      }
    }
    mma::async_commit();
    // Tile n's row table is free (its copies were issued before the barrier): tile n + 2.
    if (is_walker && n + 2 < n_kv_tiles)
      sRows[rbuf * kBN + threadIdx.x] = Copy::entry(walk_tile(n + 2));
    if constexpr (kFp8) {
      // Stage n -> the tile (tile n - 1's products are done: the barrier above), then a barrier
      // before the products read it.
      Fp8Copy::convert(sK, sV, stage_k(rbuf), stage_v(rbuf));
#if RK_HAS_WGMMA
      if (kWgmma) wgmma::fence_proxy_async();  // the generic-proxy stores, to wgmma's reads
#endif
      __syncthreads();
    }

    Acc s[kMT][kKB];  // S = Q K^T for this warp's rows, then P
    float corr[kMT][kSlots];
    float m_use[kMT][kSlots];

    // Row block mt: mask (stage 2 only), running max, correction factor; l rescaled (P and its
    // sums are formed in p_block). Maxima first run across the key blocks per
    // accumulator element (kAccElems independent chains), then fold the elements of a slot.
    // Returns whether some row's max grew (only then O needs rescaling).
    auto stats = [&](int mt) {
      bool grew = false;
      if (masked) {
        const int4 l4 = reinterpret_cast<const int4*>(sLim)[threadIdx.x];  // this thread's limits
        const int lim[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
        for (int kb = 0; kb < kKB; ++kb)
#pragma unroll
          for (int i = 0; i < mma::kAccElems; ++i) {
            const int key = n * kBN + kb * 16 + mma::acc_other(i);
            if (key > lim[mt * kSlots + mma::acc_slot(i)]) s[mt][kb].x[i] = kNegInf;
          }
      }
      float t[mma::kAccElems];
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb)
#pragma unroll
        for (int i = 0; i < mma::kAccElems; ++i) {
          t[i] = kb == 0 ? s[mt][kb].x[i] : fmaxf(t[i], s[mt][kb].x[i]);
        }
      float mx[kSlots];
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) mx[sl] = kNegInf;
#pragma unroll
      for (int i = 0; i < mma::kAccElems; ++i) mx[mma::acc_slot(i)] = fmaxf(mx[mma::acc_slot(i)], t[i]);
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) {
        float m_new = fmaxf(m[mt][sl], mma::row_max(mx[sl]));
        // With a slack, a row keeps its (finite) max while the new one exceeds it by at most the
        // slack in log2 units: its exponentials then stay <= 2^slack, and O and l need no
        // rescaling; both use the same stale max, so O / l is unchanged.
        if (m[mt][sl] != kNegInf && (m_new - m[mt][sl]) * c <= C::kRescaleSlack)
          m_new = m[mt][sl];
        m_use[mt][sl] = m_new == kNegInf ? 0.f : m_new * c;
        // Only a grown max rescales (m = -inf -> factor 0); an unchanged one leaves l and O as is.
        corr[mt][sl] = m_new > m[mt][sl] ? fast_exp2(m[mt][sl] * c - m_use[mt][sl]) : 1.f;
        grew |= m_new > m[mt][sl];
        m[mt][sl] = m_new;
      }
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) l[mt][sl] *= corr[mt][sl];
      return grew;
    };
    auto rescale = [&](int mt) {
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int i = 0; i < mma::kAccElems; ++i) o[mt][db].x[i] *= corr[mt][mma::acc_slot(i)];
    };
    // P operand of key block kb: its exponentials, and their sums into l.
    auto p_block = [&](int mt, int kb, Frag& pf) {
      float part[kSlots];
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) part[sl] = 0.f;
#pragma unroll
      for (int i = 0; i < mma::kAccElems; ++i) {
        const float pv = fast_exp2(fmaf(s[mt][kb].x[i], c, -m_use[mt][mma::acc_slot(i)]));
        s[mt][kb].x[i] = pv;
        part[mma::acc_slot(i)] += pv;
      }
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) l[mt][sl] += part[sl];  // short chains into l
      mma::p_from_acc<T>(pf, s[mt][kb]);
    };

#if RK_HAS_WGMMA
    if constexpr (kWgmma) {
      // Two 64-row halves in a pipeline: both halves' S products are issued at once; the
      // softmax of half 0 runs while the tensor cores compute S of half 1, and the softmax of
      // half 1 while they compute half 0's P*V. wgmma groups complete in order: [S0, S1, PV0, PV1].
      const uint32_t q_base = wgmma::smem_addr(sQ);
      const uint32_t k_base = wgmma::smem_addr(sK + buf * C::kKVElems);
      const uint32_t v_base = wgmma::smem_addr(sV + buf * C::kKVElems);
      wgmma::fence();
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int kk = 0; kk < kDB; ++kk) {
          // Q half mt (K-major), k-step kk; K (K-major as B = K^T), k-step kk.
          const uint32_t qa = q_base + (kk >> 2) * (kBM * 128) + mt * (64 * 128) + (kk & 3) * 32;
          const uint32_t ka = k_base + (kk >> 2) * (kBN * 128) + (kk & 3) * 32;
          wgmma::ss_m64n64k16<T>(s[mt], wgmma::desc_sw128(qa, 16, 1024),
                                 wgmma::desc_sw128(ka, 16, 1024), kk > 0);
        }
        wgmma::commit();
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        wgmma::wait<1>();  // S of half mt done (the half after it may still run)
        wgmma::fence_operands(s[mt]);
        if (warp_any(stats(mt))) rescale(mt);
        Frag pf[kKB];
#pragma unroll
        for (int kb = 0; kb < kKB; ++kb) p_block(mt, kb, pf[kb]);
        wgmma::fence_operands(o[mt]);
        wgmma::fence();
#pragma unroll
        for (int kb = 0; kb < kKB; ++kb)  // V (MN-major B), 16 keys per step, both dim halves
          wgmma::rs_m64n128k16<T>(o[mt], pf[kb].x,
                                  wgmma::desc_sw128(v_base + kb * (16 * 128), kBN * 128, 1024));
        wgmma::commit();
      }
      wgmma::wait<0>();  // V's buffer is refilled after the next barrier
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) wgmma::fence_operands(o[mt]);
    } else
#endif
    {
    // mma.sync path: S = Q K^T
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb) mma::zero(s[mt][kb]);
#pragma unroll C::kQkUnroll
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
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) grew |= stats(mt);
    // Rescale O only when some row of the warp saw a new max (rare once a row has seen its
    // largest scores, e.g. deep into a long prefix): skipping multiplies by exactly 1.
    if (warp_any(grew)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) rescale(mt);
    }
    // O += P V
#pragma unroll
    for (int kb = 0; kb < kKB; ++kb) {
      Frag pf[kMT];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) p_block(mt, kb, pf[mt]);
#pragma unroll
      for (int db = 0; db < kDB; ++db) {
        Frag vf;
        mma::load_v<D>(vf, tV, kb * 16, db * 16);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma::mma_pv<T>(o[mt][db], pf[mt], vf);
      }
    }
    }
  };

  for (int n = 0; n < n_kv_tiles; ++n) process(n, n >= n_dense);
  mma::async_wait<0>();

  // Normalise and store: 1 / (row sum over the row's lanes), 0 for a row that saw no key; FP8:
  // times the V scale (read here, so it holds no register through the loop).
  float v_factor = 1.f;
  if constexpr (kFp8) v_factor = Fp8To16<T, KV>::scale_factor(p, p.scales.v, kvh);
  float inv[kMT][kSlots];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
      const float lt = mma::row_sum(l[mt][sl]);
      // (FP8: a NaN sum, from a bad K scale, stays NaN)
      if (kFp8) inv[mt][sl] = lt != 0.f ? v_factor / lt : 0.f;
      else inv[mt][sl] = lt > 0.f ? 1.f / lt : 0.f;
    }
  if (C::kOSmem) {
    // Through this warp's own rows of the Q tile (no other warp reads them; with wgmma the whole
    // warpgroup read Q, hence the barrier): 4-byte writes in the accumulator layout, then
    // 16-byte row chunks to global memory.
    if (kWgmma) __syncthreads();
    warp_sync();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int i = 0; i < mma::kAccElems; i += 2) {
        const int r = warp_row0 + mt * kMStride + mma::acc_query(i);
        const float sc = inv[mt][mma::acc_slot(i)];
#pragma unroll
        for (int db = 0; db < kDB; ++db) {
          const int d = db * 16 + mma::acc_other(i);
          *reinterpret_cast<uint32_t*>(sQ + mma::smem_index<D>(r, d)) =
              mma::pack2<T>(o[mt][db].x[i] * sc, o[mt][db].x[i + 1] * sc);
        }
      }
    }
    warp_sync();
    constexpr int kRowsPerPass = rk::kWarpSize / C::kChunks;  // rows one pass of the warp covers
    static_assert(rk::kWarpSize % C::kChunks == 0, "whole rows per pass");
    const int lane = threadIdx.x % rk::kWarpSize;
    const int cidx = lane % C::kChunks;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      int r = warp_row0 + mt * kMStride + lane / C::kChunks;
      int pos = (row0 + r) / G, h = (row0 + r) - pos * G;  // advanced incrementally below
#pragma unroll 2  // two loads in flight per store round; a full unroll is code fetched cold
      for (int it = 0; it < 16 / kRowsPerPass; ++it) {
        if (r < rows_valid) {
          const uint4 v = *reinterpret_cast<const uint4*>(sQ + mma::smem_index<D>(r, cidx * 8));
          *reinterpret_cast<uint4*>(out + int64_t(q_begin + pos) * p.o_stride_tok +
                                    int64_t(kvh * G + h) * p.o_stride_head + cidx * 8) = v;
        }
        r += kRowsPerPass;
        advance_row(pos, h, kRowsPerPass, G);
      }
    }
  } else {
    // Element pairs (i, i+1) are adjacent dims of one row on every backend.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int i = 0; i < mma::kAccElems; i += 2) {
        const int r = warp_row0 + mt * kMStride + mma::acc_query(i);
        if (r >= rows_valid) continue;
        const int pr = row0 + r;
        const int pos = pr / G, h = pr - pos * G;
        uint16_t* orow = out + int64_t(q_begin + pos) * p.o_stride_tok + int64_t(kvh * G + h) * p.o_stride_head;
        const float sc = inv[mt][mma::acc_slot(i)];
#pragma unroll
        for (int db = 0; db < kDB; ++db) {
          const int d = db * 16 + mma::acc_other(i);
          *reinterpret_cast<uint32_t*>(orow + d) = mma::pack2<T>(o[mt][db].x[i] * sc, o[mt][db].x[i + 1] * sc);
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------- launch

// extend_ws.cuh: the warp-specialised kernel of sm_90a images (16-bit caches, D = 128).
template <class T, class KV, int D>
bool try_launch_ws(const ExtendParams& p, Stream stream);

// p without its plan unless the plan was built for tiles of kBM rows and fits a rank-order grid
// (a plan for another tile height would not cover the tiles).
inline ExtendParams with_plan_for(const ExtendParams& p, int kBM) {
  ExtendParams q = p;
  const bool fits = p.plan_len > 0 && int64_t(p.plan_len) * p.num_kv_heads <= 0x7fffffff;
  if (p.plan_rows != kBM || !fits) q.tile_plan = nullptr;
  if (q.tile_plan == nullptr) q.plan_len = 0;
  return q;
}

template <class T, class KV, int D>
void launch(const ExtendParams& p, Stream stream) {
  using C = Cfg<D>;
  if (try_launch_ws<T, KV, D>(p, stream)) return;
  constexpr int kBM = C::kBM;
  if (p.num_kv_heads == 0 || p.batch == 0) return;
  // sum_b ceil(L_q[b] * G / kBM) is at most ceil(N_q * G / kBM) + B and at most
  // B * ceil(max_q_len * G / kBM): both known without reading qo_indptr on the host.
  const int64_t g = p.num_q_heads / p.num_kv_heads;
  const int64_t per_req = (int64_t(p.max_q_len) * g + kBM - 1) / kBM;
  const int64_t a = (int64_t(p.num_q_tokens) * g + kBM - 1) / kBM + p.batch;
  const int64_t b = int64_t(p.batch) * per_req;
  const int64_t gx = a < b ? a : b;
  if (gx <= 0) return;
  const ExtendParams pp = with_plan_for(p, kBM);
  // Rank order launches B * per_req tiles per head; take it unless that is more than twice the
  // tiles that exist (then most of its CTAs would only exit). A plan launches its entries.
  const int64_t slots = pp.tile_plan != nullptr ? pp.plan_len : b;
  const bool rank = (pp.tile_plan != nullptr || b <= 2 * a) && slots * p.num_kv_heads <= 0x7fffffff;
  if (!rank && gx > 0x7fffffff) throw LaunchError("radixkv extend_attention: grid too large");
  auto kernel = rank ? extend_attention_kernel<T, KV, D, true> : extend_attention_kernel<T, KV, D, false>;
  const dim3 grid = rank ? dim3(unsigned(slots * p.num_kv_heads)) : dim3(unsigned(gx), p.num_kv_heads);
  allow_dynamic_smem(kernel, C::kSmemBytes);
  kernel<<<grid, dim3(C::kThreads), C::kSmemBytes, static_cast<stream_t>(stream)>>>(pp);
  const error_t e = last_error();
  if (e != kSuccess)
    throw LaunchError(std::string("radixkv extend_attention launch failed: ") + error_string(e));
}

}  // namespace extend_detail

// FP8-cache launchers (extend_fp8_e4m3.cu, extend_fp8_e5m2.cu); each throws rk::Unsupported when
// its variant is compiled out (RADIXKV_KV_DTYPES).
void launch_extend_attention_e4m3(const ExtendParams& p, Stream stream);
void launch_extend_attention_e5m2(const ExtendParams& p, Stream stream);

}  // namespace rk

#include "extend_ws.cuh"
