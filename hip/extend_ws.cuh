// hip/extend_ws.cuh -- the warp-specialised extend kernel of sm_90a builds (D = 128; 16-bit and FP8
// caches).
//
// Included at the end of extend_attention_kernel.cuh, whose launcher hands a launch here when the
// kernel image loaded for the device holds this kernel's sm_90a body (image_has_body below); every
// other target and head dim keeps that file's kernel.
//
// A CTA owns a 128-row query tile of one KV head (rows, masks, work order and output layout as in
// extend_attention_kernel.cuh) and runs three warpgroups:
//   producer  (warpgroup 0, setmaxnreg.dec): walks the page table and gathers K/V tiles of kBN keys
//             into a ring of kStages stages (Ring below) by 16-byte cp.async; each producer
//             thread's copies of a stage end in one cp.async.mbarrier.arrive.noinc on the stage's
//             "full" barrier (count: the 128 producer threads), so the stage is full once every
//             copy has landed. Before refilling a stage it waits on the stage's "empty" barrier.
//   consumers (warpgroups 1 and 2, setmaxnreg.inc): consumer c owns rows 64c..64c+63 of the tile and
//             reads every stage: S = Q K^T by wgmma m64n64k16 (Q from registers), the online softmax of
//             extend_attention_kernel.cuh (mask, lazy rescale), O += P V by wgmma m64n128k16 with P
//             from registers; then one arrive per warp on the stage's "empty" barrier (count 8).
// FP8 caches: the producer copies each tile's bytes into a ring of kRaw byte stages instead, kRaw - 1
// tiles ahead, and converts the oldest into the 16-bit stage itself (the chunks each producer
// thread copied, so only its own copies need to have landed), then arrives on "full" (plain
// arrive, same count). The products then run in fp16 whatever q's type: every e4m3 / e5m2 value
// is an fp16 value, so one cvt per pair of elements converts exactly; a bf16 q is converted to
// fp16 times 2^-kQShift when the consumers load it (kQShift folded back into the softmax scale),
// which keeps every bf16 value of magnitude below 2^(16 + kQShift) finite. The K scale joins the
// softmax scale and the V scale the output's, as in extend_attention_kernel.cuh.
// Ping-pong: the consumers take turns issuing their S products (named barriers kBarTurn + c), so
// one warpgroup's softmax runs while the other's products occupy the tensor cores.
//
// Barrier phases: tile n uses stage n % kStages in round n / kStages. A consumer waits for "full"
// phase (round & 1) to complete; the producer, from round 1 on, for "empty" phase ((round - 1) & 1).
// bench/lab/ws_phase_model.py replays this protocol on the CPU.
#pragma once

#include "extend_attention_kernel.cuh"

namespace rk {
namespace extend_detail {
namespace ws {

constexpr int kD = 128;
constexpr int kBM = 128;          // rows per CTA tile (two consumer warpgroups of 64)
// A key tile's kind as a type: the consumers' dense and masked steps are instantiated apart.
template <bool kMasked>
struct MaskTag {
  static constexpr bool value = kMasked;
};
#if RK_NVIDIA
static_assert(kBM == Cfg<kD>::kBM, "one tile height per head_dim (extend_tile_rows, extend plans)");
#endif
constexpr int kBN = 64;           // keys per stage
constexpr int kThreads = 384;     // producer + two consumers
constexpr int kQShift = 8;  // FP8 caches, bf16 q: q enters the fp16 products times 2^-kQShift
constexpr float kQScale = 1.f / (1 << kQShift);
constexpr int kTileBytes = kBN * kD * 2;          // one K or V stage (128-byte swizzled, 1024-aligned)
constexpr int kOffK = kBM * kD * 2;               // after the Q tile
// The ring: 16-bit caches give all the shared memory the Q tile leaves to K/V stages (6); FP8
// caches keep 4 and put kRaw byte stages (K then V, kBN rows of kD bytes each) after them.
// kWantQStage (the pair-step instance, 16-bit caches): a 7th stage in the Q tile's space, K in its
// first column half and V in its second, which the producer first fills once every consumer warp
// holds Q in registers (bar_q_free). A pair step holds two stages while the next two land, so a
// deeper ring keeps more copies in flight. The single-tile instance keeps six.
template <bool kF8, bool kWantQStage = false>
struct Ring {
  static constexpr bool kQStage = !kF8 && kWantQStage;
  static constexpr int kStages = kF8 ? 4 : (kQStage ? 7 : 6);
  static constexpr int kOwnStages = kStages - (kQStage ? 1 : 0);  // stages after the Q tile
  static constexpr int kRaw = kF8 ? 4 : 0;
  static constexpr int kRawBytes = kBN * kD;  // one K or V byte stage
  static constexpr int kOffV = kOffK + kOwnStages * kTileBytes;
  static constexpr int kOffRaw = kOffV + kOwnStages * kTileBytes;
  // Byte offsets of stage s's K and V tiles.
  static RK_HOST_DEVICE uint32_t k_off(int s) {
    return kQStage && s == kOwnStages ? 0u : uint32_t(kOffK + s * kTileBytes);
  }
  static RK_HOST_DEVICE uint32_t v_off(int s) {
    return kQStage && s == kOwnStages ? uint32_t(kTileBytes) : uint32_t(kOffV + s * kTileBytes);
  }
  static constexpr int kSmemBytes = kOffRaw + kRaw * 2 * kRawBytes + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "fits Hopper's shared memory");
  // The register split. FP8's producer holds a whole byte stage's chunks (32 registers) while it
  // converts them. setmaxnreg.inc only takes registers that .dec released in the same CTA: the
  // split must fit the launch allocation (__launch_bounds__(kThreads, 1): 65536 / 384 rounded
  // down to 8 = 168 each).
  // Stages per consumer step in the pair-step instance (extend_ws_kernel's kPairSteps): FP8's
  // consumers have 8 registers fewer, too few for the S of two stages at once (ptxas would
  // serialise the products), so they keep single tiles.
  static constexpr int kPair = kF8 ? 1 : 2;
  static constexpr int kProducerRegs = kF8 ? 72 : 56;
  static constexpr int kConsumerRegs = kF8 ? 216 : 224;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split within the launch allocation");
  // Batches whose contexts all hold at most this many keys (the caller's max_kv_len) run
  // extend_attention_kernel.cuh's kernel instead: its CTAs fit two per SM, so a grid of CTAs with
  // one or two key tiles each runs in half the waves, while this kernel's faster tiles pay on
  // longer contexts, and with a 16-bit cache so do its persistent CTAs, which start a tile under
  // the previous one and even out ragged tiles. FP8: no persistent instance, and the other
  // kernel's FP8 tiles cost more than its 16-bit ones, so it keeps more of the range.
  static constexpr int kShortContext = kF8 ? 256 : 128;
};
constexpr int kMaxStages = Ring<false, true>::kStages;  // the barrier arrays serve either ring
// Named barriers (0 is __syncthreads): the consumers' turns, and a consumers-only barrier.
constexpr int kBarTurn = 1;       // kBarTurn + c: consumer c may issue its S products
constexpr int kBarConsumers = 3;

#if RK_HAS_WGMMA
RK_DEVICE void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
RK_DEVICE void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
RK_DEVICE void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrive on `bar` once this thread's earlier cp.async copies have landed (the pending count was
// set for it at init: noinc).
RK_DEVICE void mbar_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
RK_DEVICE void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
RK_DEVICE void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
template <int kRegs>
RK_DEVICE void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
RK_DEVICE void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }

// 16 FP8 elements -> 16 fp16 elements, exactly: the hardware's pair conversion (sm_89+).
template <class KV>
RK_DEVICE void fp8x16_to_f16(uint4 raw, vec16& lo, vec16& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t pair = uint16_t(w[i / 2] >> (16 * (i % 2)));
    uint32_t h;
    if constexpr (Fp8Unit<KV>::kShifted) {
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(pair));
    } else {
      asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h) : "h"(pair));
    }
    (i < 4 ? lo : hi).w[i % 4] = h;
  }
}
#endif

// The tile a CTA owns (extend_attention_kernel.cuh's work order and input clamping).
struct Tile : TileSpan {
  int req, kvh, lq;
};

// Element offset in q of packed row pr of tile t: position pr / G, query head kvh * G + pr % G.
RK_DEVICE int64_t q_row_offset(const ExtendParams& p, const Tile& t, int G, int pr) {
  const int pos = pr / G, h = pr - pos * G;
  return int64_t(t.q_begin + pos) * p.q_stride_tok + int64_t(t.kvh * G + h) * p.q_stride_head;
}

// A persistent CTA's slots, as its producer resolved them, handed to the consumers through a small
// ring in shared memory (kInfo entries, each with a "full" and an "empty" barrier), so that the
// consumers never wait on the metadata's global loads between tiles.
constexpr int kInfo = 4;
enum SlotKind : int {
  kSlotSkip = 0,  // nothing to do (a surplus slot, or a plan entry naming no tile: recorded)
  kSlotTile = 1,  // a tile: its K/V tiles come through the stage ring
  kSlotNan = 2,   // more queries than keys: the consumers write NaN rows
};
RK_DEVICE void put_slot(int4* dst, const Tile& t, int kind) {
  dst[0] = make_int4(t.q_begin, t.row0, t.rows_valid, t.prefix);
  dst[1] = make_int4(t.lq, t.kvh, kind, 0);
}
// The consumers' view of a slot (the fields they read); returns its kind.
RK_DEVICE int get_slot(const int4* src, Tile& t) {
  const int4 a = src[0], b = src[1];
  t.q_begin = a.x;
  t.row0 = a.y;
  t.rows_valid = a.z;
  t.prefix = a.w;
  t.lq = b.x;
  t.kvh = b.y;
  return b.z;
}

// Rank order in groups: block b serves rank g * group + (b % group) of (request, KV head)
// (b / group) % (batch * H_kv), g = b / (group * batch * H_kv): the CTAs running at once hold
// `group` consecutive ranks of fewer (request, head) pairs, which read the same K/V tiles at about
// the same time (fewer DRAM reads), and groups still go longest first. Launch grid: ceil(per_req /
// group) * group * batch * H_kv blocks.
constexpr int kRankGroup = 8;  // metadata::extend_plan's RUN_TILES, RANK_GROUP_TILES = 2 x this
// Requests of fewer than 2 groups of tiles keep plain rank order (group 1: longest first).
RK_HOST_DEVICE int rank_group(int64_t per_req) { return per_req >= 2 * kRankGroup ? kRankGroup : 1; }

template <bool kRankOrder>
RK_DEVICE bool resolve_tile(const ExtendParams& p, int G, Tile& t, int lin) {
  if (kRankOrder) {
    int rank;
    if (p.tile_plan != nullptr) {  // the plan's order (extend_attention.h)
      t.kvh = lin % p.num_kv_heads;
      if (!plan_entry(p, lin / p.num_kv_heads, t.req, rank)) return false;
    } else {
      const int group = rank_group((int64_t(p.max_q_len) * G + kBM - 1) / kBM);
      const int y = lin / group;
      t.kvh = y % p.num_kv_heads;
      const int x = y / p.num_kv_heads;
      const int g = x / p.batch;
      t.req = x - g * p.batch;
      rank = g * group + (lin - y * group);
    }
    const ReqMeta m = load_req_meta(p, t.req);
    t.lq = m.q1 - m.q0;
    const int n_tiles_req = (t.lq * G + kBM - 1) / kBM;
    if (!rank_in_request(p, rank, n_tiles_req)) return false;
    return tile_span<kBM>(p, G, t.req, m, n_tiles_req - 1 - rank, t);
  }
  int tile_in_req;
  if (!find_tile<kBM>(p, G, blockIdx.x, t.req, tile_in_req)) return false;
  t.kvh = blockIdx.y;
  const ReqMeta m = load_req_meta(p, t.req);
  t.lq = m.q1 - m.q0;
  const int n_tiles_req = (t.lq * G + kBM - 1) / kBM;
  return tile_span<kBM>(p, G, t.req, m, n_tiles_req - 1 - tile_in_req, t);
}

// The rank-order launch's slots times H_kv: try_launch_ws's grid (before persistence caps it at
// the SM count) and what a persistent CTA strides over. Only called once the launcher has checked
// that the count fits in an int.
RK_HOST_DEVICE int rank_slots(const ExtendParams& p, int G) {
  if (p.tile_plan != nullptr) return p.plan_len * p.num_kv_heads;
  const int per_req = (p.max_q_len * G + kBM - 1) / kBM;
  const int group = rank_group(per_req);
  return p.batch * ((per_req + group - 1) / group) * group * p.num_kv_heads;
}

// Launches whose contexts hold at most this many keys (the caller's max_kv_len, or an unknown
// bound) run the single-tile instance, persistent with a 16-bit cache: the shorter a tile's key
// range, the more of its time goes to starting it, which persistence overlaps with the previous
// tile. Longer ones run the pair-step instance (kPairSteps: Ring::kPair tiles per consumer step),
// which saves a turn hand-over, a row-max reduction and a rescale decision per pair of key tiles.
constexpr int kSingleTileContext = 2048;

template <class T, class KV, bool kRankOrder, bool kPairSteps = false, bool kPersist = false>
__global__ void __launch_bounds__(kThreads, 1) extend_ws_kernel(const ExtendParams p) {
#if RK_HAS_WGMMA
  constexpr bool kF8 = IsFp8<KV>::value;
  using TC = std::conditional_t<kF8, f16_t, T>;  // the products' 16-bit type (see the top)
  constexpr bool kQConvert = !std::is_same<T, TC>::value;
  static_assert(!kPersist || (kRankOrder && !kF8 && !kPairSteps), "persistent: the single-tile rank-order instance, 16-bit caches");
  // kPersist (the single-tile instance's rank-order launches): one CTA per SM runs slots
  // blockIdx.x + i * gridDim.x. The producer resolves each slot, hands it to the consumers through
  // the slot ring (put_slot) and prefetches the tile's Q rows into L2, typically a ring's depth of
  // K/V tiles before the consumers load them; the K/V ring runs on across tiles (N counts the
  // stages of earlier tiles), so the producer fills the next tile's stages while the consumers
  // finish the current one. Each consumer warp loads its own Q rows and stages its own output rows
  // in the same rows of the Q tile (no consumers' barrier between tiles); the turns run on across
  // tiles. The other instances run their one tile resolved before the roles split (n_slots = 1).
  using R = Ring<kF8, kPairSteps>;  // the pair steps take a ring stage in Q's space
  constexpr int kStages = R::kStages;
  constexpr int kEB = kF8 ? 1 : 2;  // bytes per cache element
  // Stage barriers; static, so the host can tell that the image loaded holds this body.
  __shared__ __align__(8) uint64_t bar_full[kMaxStages];
  __shared__ __align__(8) uint64_t bar_empty[kMaxStages];
  __shared__ __align__(8) uint64_t bar_q_free;  // the consumers hold Q in registers (R::kQStage)
  __shared__ __align__(16) int4 slot_info[kPersist ? 2 * kInfo : 1];  // the slot ring (persistent)
  __shared__ __align__(8) uint64_t bar_info_full[kInfo];
  __shared__ __align__(8) uint64_t bar_info_empty[kInfo];
  extern __shared__ __align__(128) uint4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw);
  smem += (1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);  // [kBM][kD], 128-byte swizzled column halves
  const uint32_t q_base = wgmma::smem_addr(smem);
  const uint32_t full0 = wgmma::smem_addr(bar_full), empty0 = wgmma::smem_addr(bar_empty);
  const uint32_t info_full0 = wgmma::smem_addr(bar_info_full), info_empty0 = wgmma::smem_addr(bar_info_empty);

  const int G = p.num_q_heads / p.num_kv_heads;
  // Records, never stops.
  if (blockIdx.x == 0 && blockIdx.y == 0) guard::check_extend_batch(p, guard::kRanExtendWs, kBM);
  uint16_t* out = static_cast<uint16_t*>(p.out);
  // Slots this CTA runs: persistent, blockIdx.x + i * gridDim.x below the rank-order grid's size.
  const int n_slots = kPersist ? (rank_slots(p, G) - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : 1;
  Tile t0;  // a one-tile CTA's tile (resolved once, before the roles split)
  if constexpr (!kPersist) {
    if (!resolve_tile<kRankOrder>(p, G, t0, blockIdx.x)) return;
    if (t0.prefix < 0) {
      write_nan_rows<T, kD, kThreads>(p, G, t0.kvh, t0, threadIdx.x);
      return;
    }
  }

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 128);  // one cp.async arrive per producer thread
      mbar_init(empty0 + 8 * s, 8);   // one arrive per consumer warp
    }
    mbar_init(wgmma::smem_addr(&bar_q_free), 256);  // one arrive per consumer thread, after its Q reads
    if (kPersist) {
#pragma unroll
      for (int j = 0; j < kInfo; ++j) {
        mbar_init(info_full0 + 8 * j, 1);   // the producer's thread 0
        mbar_init(info_empty0 + 8 * j, 256);  // one arrive per consumer thread, once it has read the entry
      }
    }
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    regs_dec<R::kProducerRegs>();
    // 16-bit caches: thread u copies 16-byte chunk u % 16 of rows r0 + 8 i (i < 8, r0 = u / 16) of
    // each K and V tile. Each row is looked up once per warp: lane j < 16 of warp w resolves row
    // 2 w + (j & 1) + 8 (j >> 1) (lanes 16..31 repeat lanes 0..15) to its source address, and the
    // threads copying row r0 + 8 i read it from lane (lane >> 4) + 2 i by shuffle.
    // FP8 caches (rows of kD bytes): thread u copies chunk u % 8 of rows u / 8 + 16 i (i < 4); lane
    // j < 16 of warp w resolves row 4 w + (j & 3) + 16 (j >> 2), read by lane (lane >> 3) + 4 i.
    // Page ids are loaded a tile ahead of the copies, so no copy waits on a table read; page-range
    // faults are recorded once, where the producer ends.
    const int u = threadIdx.x;
    const int lane = u % 32, jj = lane % 16;
    guard::Faults faults;
    int N = 0;
    for (int i = 0; i < n_slots; ++i) {  // one pass (a compile-time 1) unless persistent
      const int lin = int(blockIdx.x) + i * int(gridDim.x);
      Tile t;
      if constexpr (kPersist) {
        const int kind = !resolve_tile<kRankOrder>(p, G, t, lin) ? kSlotSkip : t.prefix < 0 ? kSlotNan : kSlotTile;
        if (u == 0) {
          const int j = i % kInfo, round = i / kInfo;
          if (round > 0) mbar_wait(info_empty0 + 8 * j, (round - 1) & 1);
          put_slot(slot_info + 2 * j, t, kind);
          mbar_arrive(info_full0 + 8 * j);  // release: the consumers' wait orders their reads after it
        }
        if (kind != kSlotTile) continue;
        static_assert(kBM == 128 && kD == 128, "Q prefetch: a row per producer thread, 256 bytes each");
        if (u < t.rows_valid) {
          const char* row = reinterpret_cast<const char*>(static_cast<const uint16_t*>(p.q) + q_row_offset(p, t, G, t.row0 + u));
          prefetch_l2(row);
          prefetch_l2(row + 128);
        }
      } else {
        t = t0;
      }
      const int n_kv_tiles = ((t.row0 + t.rows_valid - 1) / G + t.prefix + 1 + kBN - 1) / kBN;
      const int my_row = kF8 ? 4 * (u / 32) + (jj & 3) + 16 * (jj >> 2) : 2 * (u / 32) + (jj & 1) + 8 * (jj >> 1);
      const int ps = p.page_size;
      const int tile_pages = kBN / ps, tile_off = kBN - tile_pages * ps;
      const uint64_t k_head = reinterpret_cast<uintptr_t>(p.k_cache) + kEB * uint64_t(int64_t(t.kvh) * p.kv_stride_head);
      const int64_t v_minus_k =
          int64_t(reinterpret_cast<uintptr_t>(p.v_cache)) - int64_t(reinterpret_cast<uintptr_t>(p.k_cache));
      // Byte strides; the launcher takes this kernel only when they fit in 31 bits.
      const int page_bytes = int(kEB * p.kv_stride_page), slot_bytes = int(kEB * p.kv_stride_slot);
      // Walker: page and slot of this lane's row in tile w_tile (key w_tile * kBN + my_row).
      int w_pidx = my_row / ps, w_off = my_row - (my_row / ps) * ps, w_tile = 0;
      auto lookup = [&](int& id, int& off) {
        id = fetch_page(t.pages, w_pidx, w_tile * kBN + my_row, t.lk);
        off = w_off;
        ++w_tile;
        w_pidx += tile_pages;
        w_off += tile_off;
        if (w_off >= ps) {
          w_off -= ps;
          ++w_pidx;
        }
      };
      // This lane's row of tile n (page id, slot): its K row's byte address, bit 0 set when it is
      // copied (16-byte aligned addresses leave bit 0 free); a row to zero-fill keeps an aligned,
      // unread address.
      auto row_entry = [&](int n, int id, int off) -> uint64_t {
        const int key = n * kBN + my_row;
        const bool valid = key < t.lk && id >= 0 && id < p.num_pages;
        if (key < t.lk && !valid) faults.checks |= guard::kPageRange;
        return valid ? (k_head + uint64_t(int64_t(id) * page_bytes + int64_t(off) * slot_bytes)) | 1u : k_head;
      };
      // Copy 16 bytes at chunk offset `chunk` of the row lane `from` resolved (K, and V at the same
      // place) to shared addresses dk, dv.
      auto copy_pair = [&](uint64_t e, int from, uint64_t chunk, uint32_t dk, uint32_t dv) {
        const uint32_t lo = __shfl_sync(0xffffffffu, uint32_t(e), from);
        const uint32_t hi = __shfl_sync(0xffffffffu, uint32_t(e >> 32), from);
        const int bytes = int(lo & 1u) << 4;
        const uint64_t src = ((uint64_t(hi) << 32) | (lo & ~1u)) + chunk;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dk), "l"(src), "r"(bytes));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dv), "l"(src + v_minus_k), "r"(bytes));
      };
      int id_cur, off_cur, id_nxt, off_nxt;
      lookup(id_cur, off_cur);
      if constexpr (!kF8) {
        constexpr int kRows = kBN / 8;
        // Swizzled destination of row u / 16 + 8 i (bytes from a stage's start): rows 8 apart keep
        // the swizzle phase (row % 8), so they are 8 * 128 bytes apart.
        const uint32_t dst0 = 2u * wgmma::sw128_index<kBN>(u / 16, (u % 16) * 8);
        static_assert(wgmma::sw128_index<kBN>(8, 0) == 8 * 64, "rows 8 apart: 1024 bytes");
        for (int n = 0; n < n_kv_tiles; ++n) {
          const int s = (N + n) % kStages, round = (N + n) / kStages;
          lookup(id_nxt, off_nxt);  // tile n + 1; keys past L_k read nothing (fetch_page)
          const uint64_t e = row_entry(n, id_cur, off_cur);
          if (round > 0) mbar_wait(empty0 + 8 * s, (round - 1) & 1);
          // The first fill of the stage in Q's space waits for the consumers to hold Q.
          if (R::kQStage && N + n == R::kOwnStages) mbar_wait(wgmma::smem_addr(&bar_q_free), 0);
          const uint32_t sk = q_base + R::k_off(s), sv = q_base + R::v_off(s);
#pragma unroll
          for (int i = 0; i < kRows; ++i)
            copy_pair(e, (lane >> 4) + 2 * i, 16u * (u % 16), sk + dst0 + 1024 * i, sv + dst0 + 1024 * i);
          mbar_arrive_on_copies(full0 + 8 * s);
          id_cur = id_nxt;
          off_cur = off_nxt;
        }
      } else {
        constexpr int kRaw = R::kRaw, kRows = kBN / 16;
        const uint32_t raw0 = q_base + R::kOffRaw;  // byte stage j: K at + 2 j kRawBytes, V after it
        const int c16 = u % 8;
        // Tile n's bytes into byte stage n % kRaw (K and V; rows of kD bytes, unswizzled). This
        // thread's chunks of a stage are only ever read back by this thread (convert below).
        auto issue_raw = [&](int n) {
          lookup(id_nxt, off_nxt);
          const uint64_t e = row_entry(n, id_cur, off_cur);
          id_cur = id_nxt;
          off_cur = off_nxt;
          const uint32_t rk = raw0 + (n % kRaw) * 2 * R::kRawBytes;
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const uint32_t d = (u / 8 + 16 * i) * kD + 16 * c16;
            copy_pair(e, (lane >> 3) + 4 * i, 16u * c16, rk + d, rk + R::kRawBytes + d);
          }
        };
        // Conversion of this thread's chunks of byte stage `j` (rows u / 8 + 16 i, chunk c16) into
        // 16-bit stage s (the swizzled layout the 16-bit copies land in): the stage's 2 kRows chunks
        // (K, V) are read into registers together, so their shared-load latencies overlap.
        using Half = uint4[kRows];
        auto load_half = [&](int j, int half, Half& raw) {
          const uint8_t* src = reinterpret_cast<const uint8_t*>(smem + R::kOffRaw + (2 * j + half) * R::kRawBytes);
#pragma unroll
          for (int i = 0; i < kRows; ++i)
            raw[i] = *reinterpret_cast<const uint4*>(src + (u / 8 + 16 * i) * kD + 16 * c16);
        };
        // The 8 lanes of a quarter warp store one row: chunks 0, 2, 4, 6 of both 128-byte column
        // halves, which share banks, so lanes of the second half store their odd chunk first (no
        // bank conflict in either store).
        const bool odd_first = c16 >= 4;
        const int col_first = 16 * c16 + (odd_first ? 8 : 0), col_second = 16 * c16 + (odd_first ? 0 : 8);
        auto store_half = [&](const Half& raw, int half, int s) {
          uint16_t* dst = reinterpret_cast<uint16_t*>(smem + (half ? R::v_off(s) : R::k_off(s)));
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const int r = u / 8 + 16 * i;
            const uint4 w = odd_first ? make_uint4(raw[i].z, raw[i].w, raw[i].x, raw[i].y) : raw[i];
            vec16 first, second;
            fp8x16_to_f16<KV>(w, first, second);
            store16(dst + wgmma::sw128_index<kBN>(r, col_first), first);
            store16(dst + wgmma::sw128_index<kBN>(r, col_second), second);
          }
        };
#pragma unroll 1
        for (int n = 0; n + 1 < kRaw; ++n) {
          if (n < n_kv_tiles) issue_raw(n);
          mma::async_commit();
        }
        for (int n = 0; n < n_kv_tiles; ++n) {
          const int s = n % kStages, round = n / kStages;
          // Byte stage (n - 1) % kRaw is free: this thread converted its chunks of tile n - 1.
          if (n + kRaw - 1 < n_kv_tiles) issue_raw(n + kRaw - 1);
          mma::async_commit();
          mma::async_wait<kRaw - 1>();  // this thread's copies of tile n have landed
          Half rk, rv;
          load_half(n % kRaw, 0, rk);  // read while the 16-bit stage may still be in use
          load_half(n % kRaw, 1, rv);
          if (round > 0) mbar_wait(empty0 + 8 * s, (round - 1) & 1);
          store_half(rk, 0, s);
          store_half(rv, 1, s);
          wgmma::fence_proxy_async();  // the converted tile, visible to the tensor cores' reads
          mbar_arrive(full0 + 8 * s);
        }
      }
      N += n_kv_tiles;
    }
    guard::report(p.status, guard::kExtend, faults);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // -------------------------------------------------------------------- consumers
  regs_inc<R::kConsumerRegs>();
  const int c = wg - 1;                 // rows 64c .. 64c + 63 of the tile
  const int ct = threadIdx.x - 128;     // 0 .. 255 among the consumers
  const int wq = (threadIdx.x / 32) % 4;  // warp within the warpgroup: rows 16 wq.. of the half
  const int warp_row0 = c * 64 + wq * 16;
  const int lane = threadIdx.x % 32;
  int N = 0;
  // Persistent: the turns run on across tiles (consumer 1's last hand-over of a tile lets consumer
  // 0 issue first in the next), so consumer 1 arrives ahead only before the first tile, and
  // consumer 0 takes the last hand-over once, after the last.
  bool started = false;
  for (int i = 0; i < n_slots; ++i) {  // one pass (a compile-time 1) unless persistent
    Tile t;
    if constexpr (kPersist) {
      const int j = i % kInfo;
      mbar_wait(info_full0 + 8 * j, (i / kInfo) & 1);
      const int kind = get_slot(slot_info + 2 * j, t);
      mbar_arrive(info_empty0 + 8 * j);
      if (kind == kSlotSkip) continue;
      if (kind == kSlotNan) {  // the consumers write a NaN tile (the producer copies nothing)
        write_nan_rows<T, kD, 256>(p, G, t.kvh, t, ct);
        continue;
      }
    } else {
      t = t0;
    }
    const int pos_first = t.row0 / G;
    const int pos_last = (t.row0 + t.rows_valid - 1) / G;
    const int n_kv_tiles = (pos_last + t.prefix + 1 + kBN - 1) / kBN;
    const int n_dense = (pos_first + t.prefix + 1) / kBN;  // tiles visible to every row

    if constexpr (kPersist) {
      // This warp's own 16 rows (no other warp reads or writes them: the output is staged in the
      // same rows and layout), so no consumers' barrier.
      const uint16_t* q = static_cast<const uint16_t*>(p.q);
#pragma unroll
      for (int i = 0; i < 16 * 16 / 32; ++i) {
        const int idx = lane + 32 * i;
        const int r = warp_row0 + idx / 16, ch = idx % 16;
        const bool valid = r < t.rows_valid;
        const int64_t off = q_row_offset(p, t, G, t.row0 + r);
        mma::async_copy16(sQ + wgmma::sw128_index<kBM>(r, ch * 8), q + (valid ? off : 0) + ch * 8, valid);
      }
      mma::async_commit();
      mma::async_wait<0>();
      __syncwarp();
    } else {
      const uint16_t* q = static_cast<const uint16_t*>(p.q);
#pragma unroll
      for (int i = 0; i < kBM * 16 / 256; ++i) {
        const int idx = ct + 256 * i;
        const int r = idx / 16, ch = idx % 16;
        const bool valid = r < t.rows_valid;
        const uint16_t* src = q + (valid ? q_row_offset(p, t, G, t.row0 + r) : 0) + ch * 8;
        if constexpr (kQConvert) {  // bf16 -> fp16 times 2^-kQShift
          uint4 raw = make_uint4(0, 0, 0, 0);
          if (valid) raw = *reinterpret_cast<const uint4*>(src);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
          vec16 h;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float a, b;
            Convert<T>::unpack2(w[j], a, b);
            h.w[j] = Convert<TC>::pack2(a * kQScale, b * kQScale);
          }
          store16(sQ + wgmma::sw128_index<kBM>(r, ch * 8), h);
        } else {
          mma::async_copy16(sQ + wgmma::sw128_index<kBM>(r, ch * 8), src, valid);
        }
      }
      mma::async_commit();
      mma::async_wait<0>();
      bar_sync(kBarConsumers, 256);
    }
    // This warp's 16 rows of Q as A fragments (registers), one per 16 dims: S = Q K^T then reads
    // only K from shared memory.
    Frag qf[kD / 16];
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      mma::ldmatrix_x4_at(qf[kk], wgmma::smem_addr(sQ + wgmma::sw128_index<kBM>(warp_row0 + (lane & 15),
                                                                                kk * 16 + 8 * (lane >> 4))));
    if constexpr (R::kQStage) mbar_arrive(wgmma::smem_addr(&bar_q_free));  // Q's space may now take K/V

    constexpr int kSlots = mma::kRowSlots;
    int lim[kSlots];  // key j is visible to the slot's row iff j <= lim
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
      const int pos = (t.row0 + warp_row0 + mma::slot_query(sl)) / G;
      lim[sl] = min(pos, t.lq - 1) + t.prefix;
    }
    Acc o[kD / 16];
    float m[kSlots], l[kSlots];
#pragma unroll
    for (int db = 0; db < kD / 16; ++db) mma::zero(o[db]);
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
      m[sl] = kNegInf;
      l[sl] = 0.f;
    }
    // FP8: the K scale joins the softmax scale (the fp16 conversion is exact: no unit); a bad
    // scale is NaN here (extend_head_scale), so the output is NaN, and check_extend_batch records it.
    float cs = p.sm_scale * kLog2e;
    if constexpr (kF8) cs *= extend_head_scale(p, p.scales.k, t.kvh);
    if constexpr (kQConvert) cs *= float(1 << kQShift);
    constexpr float kSlack = ExtendCommon::kRescaleSlack;

    if (c == 1 && (!kPersist || !started)) bar_arrive(kBarTurn + 0, 256);  // consumer 0 issues first
    started = true;

    // Tile n's stage holds all its copies, visible to the tensor cores' reads.
    auto wait_full = [&](int n) {
      mbar_wait(full0 + 8 * ((N + n) % kStages), ((N + n) / kStages) & 1);
      wgmma::fence_proxy_async();
    };
    // Groups of tiles: the pair-step instance steps over groups of kGroup tiles (the turn hand-over,
    // the waits, the row maxima and O's rescale come once per group), the other over single tiles.
    // When the tile count is not a multiple of the group size, the last group holds one tile. Each
    // group size has its own instance of the steps, so that every product sequence is straight-line
    // code, which ptxas needs to keep the products asynchronous.
    constexpr int kGroup = kPairSteps ? R::kPair : 1;
    using One = std::integral_constant<int, 1>;
    using Full = std::integral_constant<int, kGroup>;
    Acc sc[kGroup][kBN / 16];   // S of a group, then its exponentials
    Frag pf[kGroup][kBN / 16];  // P operand of the group whose P * V is next
    // Descriptors as base + offset: the start-address field holds address / 16 (shared addresses
    // below 2^18, offsets multiples of 16, so the sum never carries out of the field), which leaves
    // one add per product instead of re-encoding each address.
    const uint64_t k_desc = wgmma::desc_sw128(q_base, 16, 1024);
    const uint64_t v_desc = wgmma::desc_sw128(q_base, kBN * 128, 1024);
    // The helpers below act on the group of tiles t .. t + kN - 1 (kN from the tag).
    auto issue_s = [&](int t, auto n_tag) {
      constexpr int kN = decltype(n_tag)::value;
#pragma unroll
      for (int h = 0; h < kN; ++h) {
        const uint64_t ks = k_desc + R::k_off((N + t + h) % kStages) / 16;
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t ko = ((kk >> 2) * (kBN * 128) + (kk & 3) * 32) / 16;
          wgmma::rs_m64n64k16<TC>(sc[h], qf[kk].x, ks + ko, kk > 0);
        }
      }
      wgmma::commit();
    };
    auto issue_pv = [&](int t, auto n_tag) {  // O += P V (V MN-major: 16 keys per step, both column halves)
      constexpr int kN = decltype(n_tag)::value;
#pragma unroll
      for (int h = 0; h < kN; ++h) {
        const uint64_t vs = v_desc + R::v_off((N + t + h) % kStages) / 16;
#pragma unroll
        for (int kb = 0; kb < kBN / 16; ++kb)
          wgmma::rs_m64n128k16<TC>(o, pf[h][kb].x, vs + uint32_t(kb * (16 * 128) / 16));
      }
      wgmma::commit();
    };
    auto release = [&](int t, auto n_tag) {  // this warp is done with the group's stages
      constexpr int kN = decltype(n_tag)::value;
      __syncwarp();
      if (lane == 0) {
#pragma unroll
        for (int h = 0; h < kN; ++h) mbar_arrive(empty0 + 8 * ((N + t + h) % kStages));
      }
    };
    auto wait_group = [&](int t, auto n_tag) {
      constexpr int kN = decltype(n_tag)::value;
#pragma unroll
      for (int h = 0; h < kN; ++h) wait_full(t + h);
    };
    // The group's S (in sc) -> mask, running max, l rescaled and extended, exponentials in sc
    // (extend_attention_kernel.cuh's stats and p_block). Returns whether O needs rescaling by corr.
    float corr[kSlots];
    auto softmax = [&](int t, auto n_tag, auto masked_tag) {
      constexpr int kN = decltype(n_tag)::value;
      constexpr bool kMasked = decltype(masked_tag)::value;
      float mx[kSlots];
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) mx[sl] = kNegInf;
#pragma unroll
      for (int h = 0; h < kN; ++h)
#pragma unroll
        for (int kb = 0; kb < kBN / 16; ++kb)
#pragma unroll
          for (int i = 0; i < mma::kAccElems; ++i) {
            if (kMasked) {
              const int key = (t + h) * kBN + kb * 16 + mma::acc_other(i);
              if (key > lim[mma::acc_slot(i)]) sc[h][kb].x[i] = kNegInf;
            }
            mx[mma::acc_slot(i)] = fmaxf(mx[mma::acc_slot(i)], sc[h][kb].x[i]);
          }
      float m_use[kSlots];
      bool grew = false;
#pragma unroll
      for (int sl = 0; sl < kSlots; ++sl) {
        float m_new = fmaxf(m[sl], mma::row_max(mx[sl]));
        if (m[sl] != kNegInf && (m_new - m[sl]) * cs <= kSlack) m_new = m[sl];
        m_use[sl] = m_new == kNegInf ? 0.f : m_new * cs;
        corr[sl] = m_new > m[sl] ? fast_exp2(m[sl] * cs - m_use[sl]) : 1.f;
        grew |= m_new > m[sl];
        m[sl] = m_new;
        l[sl] *= corr[sl];
      }
#pragma unroll
      for (int h = 0; h < kN; ++h)
#pragma unroll
        for (int kb = 0; kb < kBN / 16; ++kb)
#pragma unroll
          for (int i = 0; i < mma::kAccElems; ++i) {
            const float pv = fast_exp2(fmaf(sc[h][kb].x[i], cs, -m_use[mma::acc_slot(i)]));
            sc[h][kb].x[i] = pv;
            l[mma::acc_slot(i)] += pv;
          }
      return warp_any(grew);
    };
    auto rescale = [&] {
#pragma unroll
      for (int db = 0; db < kD / 16; ++db)
#pragma unroll
        for (int i = 0; i < mma::kAccElems; ++i) o[db].x[i] *= corr[mma::acc_slot(i)];
    };
    auto pack = [&](auto n_tag) {
      constexpr int kN = decltype(n_tag)::value;
#pragma unroll
      for (int h = 0; h < kN; ++h)
#pragma unroll
        for (int kb = 0; kb < kBN / 16; ++kb) mma::p_from_acc<TC>(pf[h][kb], sc[h][kb]);
    };
    // Every tile in groups of kGroup; group j is tiles kGroup j .. kGroup j + kGroup - 1.
    const bool odd = n_kv_tiles % kGroup != 0;
    const int n_groups = (n_kv_tiles + kGroup - 1) / kGroup;
    const int n_full = n_groups - (odd ? 1 : 0);  // groups of kGroup tiles
    const int n_dense_groups = n_dense / kGroup;  // groups whose every key every row sees
    // Group 0: its S on this consumer's turn, its softmax.
    auto first = [&](auto n_tag) {
      wait_group(0, n_tag);
      bar_sync(kBarTurn + c, 256);
      wgmma::fence();
      issue_s(0, n_tag);
      bar_arrive(kBarTurn + (1 - c), 256);
      wgmma::wait<0>();
      wgmma::fence_operands(sc);
      if (n_dense_groups > 0 ? softmax(0, n_tag, MaskTag<false>{}) : softmax(0, n_tag, MaskTag<true>{})) rescale();
      pack(n_tag);
    };
    // Step j (on this consumer's turn): issue S of group j + 1 (n_tag tiles) and P V of group j;
    // group j + 1's softmax starts while P V of group j is in flight (ptxas places the wait for it
    // after the row maxima, before the exponentials); O is rescaled once that product is done.
    // wgmma groups complete in order: [S(j + 1), PV(j)].
    auto step = [&](int j, auto n_tag, auto masked_tag) {
      wait_group(kGroup * (j + 1), n_tag);
      bar_sync(kBarTurn + c, 256);
      wgmma::fence_operands(o);
      wgmma::fence();
      issue_s(kGroup * (j + 1), n_tag);
      issue_pv(kGroup * j, Full{});
      bar_arrive(kBarTurn + (1 - c), 256);
      wgmma::wait<1>();
      wgmma::fence_operands(sc);
      const bool grew = softmax(kGroup * (j + 1), n_tag, masked_tag);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      release(kGroup * j, Full{});
      if (grew) rescale();
      pack(n_tag);
    };
    auto last = [&](int j, auto n_tag) {  // P V of the last group
      wgmma::fence_operands(o);
      wgmma::fence();
      issue_pv(kGroup * j, n_tag);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      release(kGroup * j, n_tag);
    };
    if (n_full > 0) first(Full{});
    else first(One{});
    int j = 0;
    for (; j + 1 < min(n_dense_groups, n_full); ++j) step(j, Full{}, MaskTag<false>{});  // a short last group is never dense
    for (; j + 1 < n_full; ++j) step(j, Full{}, MaskTag<true>{});
    if (odd && j + 1 < n_groups) {
      step(j, One{}, MaskTag<true>{});
      ++j;
    }
    if (odd) last(j, One{});
    else last(j, Full{});
    if (!kPersist && c == 0) bar_sync(kBarTurn + 0, 256);  // consumer 1's last turn hand-over

    // Normalise, stage through the Q tile (both consumers are done reading it: the barrier;
    // persistent: this warp's own rows, no barrier), store 16-byte row chunks.
    // FP8: times the V scale; a NaN sum, from a bad K scale, stays NaN.
    float v_factor = 1.f;
    if constexpr (kF8) v_factor = extend_head_scale(p, p.scales.v, t.kvh);
    float inv[kSlots];
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
      const float lt = mma::row_sum(l[sl]);
      if (kF8) inv[sl] = lt != 0.f ? v_factor / lt : 0.f;
      else inv[sl] = lt > 0.f ? 1.f / lt : 0.f;
    }
    if constexpr (!kPersist) bar_sync(kBarConsumers, 256);
#pragma unroll
    for (int i = 0; i < mma::kAccElems; i += 2) {
      const int r = warp_row0 + mma::acc_query(i);
      const float f = inv[mma::acc_slot(i)];
#pragma unroll
      for (int db = 0; db < kD / 16; ++db) {
        const int d = db * 16 + mma::acc_other(i);
        *reinterpret_cast<uint32_t*>(sQ + wgmma::sw128_index<kBM>(r, d)) = mma::pack2<T>(o[db].x[i] * f, o[db].x[i + 1] * f);
      }
    }
    __syncwarp();
    constexpr int kChunks = kD / 8;
    constexpr int kRowsPerPass = 32 / kChunks;
    const int cidx = lane % kChunks;
    int r = warp_row0 + lane / kChunks;
    int pos = (t.row0 + r) / G, h = (t.row0 + r) - pos * G;
#pragma unroll
    for (int it = 0; it < 16 / kRowsPerPass; ++it) {
      if (r < t.rows_valid) {
        const uint4 v = *reinterpret_cast<const uint4*>(sQ + wgmma::sw128_index<kBM>(r, cidx * 8));
        *reinterpret_cast<uint4*>(out + int64_t(t.q_begin + pos) * p.o_stride_tok +
                                  int64_t(t.kvh * G + h) * p.o_stride_head + cidx * 8) = v;
      }
      r += kRowsPerPass;
      advance_row(pos, h, kRowsPerPass, G);
    }
    N += n_kv_tiles;
  }
  if (kPersist && c == 0 && started) bar_sync(kBarTurn + 0, 256);
#endif
}

// Whether the kernel image loaded for the current device holds the sm_90a body (its static
// barriers show in the function's attributes); cached per device.
template <class Kernel>
bool image_has_body(Kernel kernel) {
#if RK_NVIDIA
  static int8_t known[64] = {};  // 0: not asked, 1: yes, -1: no
  const int dev = current_device();
  if (dev < 0) return false;
  if (dev < 64 && known[dev] != 0) return known[dev] > 0;
  cudaFuncAttributes attr{};
  const bool yes = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.sharedSizeBytes > 0;
  if (!yes) (void)cudaGetLastError();
  if (dev < 64) known[dev] = yes ? 1 : -1;
  return yes;
#else
  (void)kernel;
  return false;
#endif
}

}  // namespace ws

// Launch the warp-specialised kernel when it applies (D = 128, an sm_90a image);
// false: the caller launches extend_attention_kernel.
template <class T, class KV, int D>
bool try_launch_ws(const ExtendParams& p, Stream stream) {
#if RK_NVIDIA
  if constexpr (D == ws::kD) {
    if (p.max_kv_len > 0 && p.max_kv_len <= ws::Ring<IsFp8<KV>::value>::kShortContext) return false;
    if (!ws::image_has_body(ws::extend_ws_kernel<T, KV, true>)) return false;
    // The producer forms row addresses with 32-bit byte strides.
    if (p.kv_stride_page < 0 || p.kv_stride_slot < 0 || p.kv_stride_page > 0x3fffffff ||
        p.kv_stride_slot > 0x3fffffff)
      return false;
    constexpr int kBM = ws::kBM;
    const int64_t g = p.num_q_heads / p.num_kv_heads;
    const int64_t per_req = (int64_t(p.max_q_len) * g + kBM - 1) / kBM;
    const int64_t a = (int64_t(p.num_q_tokens) * g + kBM - 1) / kBM + p.batch;
    const int64_t b = int64_t(p.batch) * per_req;
    const int64_t group = ws::rank_group(per_req);
    const int64_t b_grid = int64_t(p.batch) * ((per_req + group - 1) / group) * group;  // resolve_tile
    const int64_t gx = a < b ? a : b;
    if (gx <= 0) return true;
    const ExtendParams pp = with_plan_for(p, kBM);
    const int64_t slots = pp.tile_plan != nullptr ? pp.plan_len : b_grid;  // a plan launches its entries
    const bool rank = (pp.tile_plan != nullptr || b <= 2 * a) && slots * p.num_kv_heads <= 0x7fffffff;
    if (!rank && gx > 0x7fffffff) throw LaunchError("radixkv extend_attention: grid too large");
    auto kernel = rank ? ws::extend_ws_kernel<T, KV, true> : ws::extend_ws_kernel<T, KV, false>;
    int64_t blocks = rank ? ws::rank_slots(pp, int(g)) : gx;
    if (rank) {
      constexpr bool kF8 = IsFp8<KV>::value;
      if (p.max_kv_len > ws::kSingleTileContext) {
        // Long contexts step over pairs of tiles, one CTA per tile (rank order only: request
        // order, find_tile, leaves too few registers for the pair steps).
        if constexpr (ws::Ring<kF8>::kPair > 1) kernel = ws::extend_ws_kernel<T, KV, true, true>;
      } else if constexpr (!kF8) {
        // Shorter ones (16-bit caches): one persistent CTA per SM strides over the slots.
        kernel = ws::extend_ws_kernel<T, KV, true, false, true>;
        const int64_t sms = sm_count();
        if (blocks > sms) blocks = sms;
      }
    }
    const dim3 grid = rank ? dim3(unsigned(blocks)) : dim3(unsigned(gx), p.num_kv_heads);
    constexpr int kSmem = ws::Ring<IsFp8<KV>::value>::kSmemBytes;
    allow_dynamic_smem(kernel, kSmem);
    kernel<<<grid, dim3(ws::kThreads), kSmem, static_cast<stream_t>(stream)>>>(pp);
    const error_t e = last_error();
    if (e != kSuccess)
      throw LaunchError(std::string("radixkv extend_attention launch failed: ") + error_string(e));
    return true;
  }
#endif
  (void)p;
  (void)stream;
  return false;
}

}  // namespace extend_detail
}  // namespace rk
