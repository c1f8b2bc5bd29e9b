"""Rewrite a copy of hip/'s matrix-unit decode merge as a designated merger fed by flagged words
(a lab variant, session 28; NVIDIA only, sm_90a builds).

    python3 bench/lab/dec28_ll.py HIPDIR

edits HIPDIR/paged_decode_mma.cuh in place. A request cut into several units is merged by its
last unit (the highest grid row, so dispatched last) instead of the last to take a ticket: the
other units write their normalised partials and (m, l) as 64-bit words (float bits, flag) with
relaxed stores, no fence and no ticket; the merger polls each word until its flag is this
launch's, sums in the product's order (its own partial from shared memory as the last unit), so
outputs should equal main's bit for bit. The flag is the group's counter word + 1, read at the
block's start; the merger bumps the counter at the end. Lab only: the workspace must hold twice
the product's floats (dec25_ab.py --ws-floats), stale words of another group with an equal
counter would be taken for fresh ones, and a poll gives up after 2^22 tries.
"""
from __future__ import annotations

import sys
from pathlib import Path

HELPERS = r'''
// LAB (dec28_ll): 64-bit (value, flag) words, relaxed at gpu scope (single-copy atomic per word).
RK_DEVICE void ll_store2(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};\n" ::"l"(p), "l"(a), "l"(b) : "memory");
}
RK_DEVICE void ll_store1(uint64_t* p, uint64_t a) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;\n" ::"l"(p), "l"(a) : "memory");
}
RK_DEVICE void ll_load2(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];\n" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
RK_DEVICE uint64_t ll_load1(const uint64_t* p) {
  uint64_t a;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];\n" : "=l"(a) : "l"(p) : "memory");
  return a;
}
RK_DEVICE uint64_t ll_word(float v, uint32_t flag) {
  return (static_cast<uint64_t>(flag) << 32) | __float_as_uint(v);
}
RK_DEVICE bool ll_ok(uint64_t w, uint32_t flag) { return static_cast<uint32_t>(w >> 32) == flag; }
RK_DEVICE float ll_val(uint64_t w) { return __uint_as_float(static_cast<uint32_t>(w)); }
// Polls one word until its flag is `flag` (gives up after 2^22 tries: a lab guard, not a protocol).
RK_DEVICE float ll_wait1(const uint64_t* p, uint32_t flag) {
  uint64_t w = ll_load1(p);
  for (int it = 0; !ll_ok(w, flag) && it < (1 << 22); ++it) w = ll_load1(p);
  return ll_val(w);
}
RK_DEVICE float4 ll_wait4(const uint64_t* p, uint32_t flag) {
  uint64_t a, b, c, d;
  ll_load2(p, a, b);
  ll_load2(p + 2, c, d);
  for (int it = 0; !(ll_ok(a, flag) && ll_ok(b, flag) && ll_ok(c, flag) && ll_ok(d, flag)) && it < (1 << 22); ++it) {
    ll_load2(p, a, b);
    ll_load2(p + 2, c, d);
  }
  return make_float4(ll_val(a), ll_val(b), ll_val(c), ll_val(d));
}
'''

EPOCH_AFTER = "  const bool rows_agree = units > 1 ? group_rows_agree<C::kThreads>(p, unit, b, first, units, tid) : true;\n"
EPOCH = EPOCH_AFTER + r'''  // LAB: this launch's flag for the group's words (its counter + 1; the merger bumps the counter).
  int* counter = p.counters + (static_cast<int64_t>(b) * p.num_kv_heads + kvh) * chunks + chunk;
  const uint32_t ll_flag = units > 1 ? static_cast<uint32_t>(*reinterpret_cast<volatile int*>(counter)) + 1u : 0u;
'''

# Declarations the merger needs, before the partial's store loop.
LOOP = ("  for (int idx = tid; idx < rows * D4; idx += C::kThreads) {\n"
        "    const int r = idx / D4, d = (idx % D4) * 4;\n"
        "    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);\n")
DECLS = r'''  const bool is_merger = merged && unit == first + units - 1;
  uint64_t* ll = reinterpret_cast<uint64_t*>(p.workspace);
  constexpr int kOwnOff = (C::kMergeBytes > C::kCombineBytes ? C::kMergeBytes : C::kCombineBytes) / 4;
  static_assert((kOwnOff + kRows * D) * 4 <= C::kWorkBytes, "the merger's own partial fits");
  float* own = reinterpret_cast<float*>(sWork) + kOwnOff;
'''

# From the store loop's workspace branch to the end of the merge: the branch becomes the merger's
# and the writers' stores, the ticket and merge the merger's wait on flagged words.
OLD_START = ("    } else {\n"
             "      const int64_t row = static_cast<int64_t>(unit) * p.num_q_heads + h0 + r;\n"
             "      *reinterpret_cast<float4*>(p.workspace")
OLD_END = "  if (tid == 0) *counter = 0;  // ready for the next launch (stream order)\n"

NEW = r'''    } else if (is_merger) {
      *reinterpret_cast<float4*>(own + r * D + d) = a;
    } else {
      const int64_t row = static_cast<int64_t>(unit) * p.num_q_heads + h0 + r;
      uint64_t* dst = ll + row * D + d;
      ll_store2(dst, ll_word(a.x, ll_flag), ll_word(a.y, ll_flag));
      ll_store2(dst + 2, ll_word(a.z, ll_flag), ll_word(a.w, ll_flag));
      if (d == 0) {
        ll_store1(ll + ws_rows * D + row, ll_word(sm_L[r] > 0.f ? sm_M[r] : kNegInf, ll_flag));
        ll_store1(ll + ws_rows * (D + 1) + row, ll_word(sm_L[r], ll_flag));
      }
    }
  }
  if (!is_merger) return;

  const int NS = units;
  const int64_t split_rows = p.num_q_heads;
  const int64_t row_b = static_cast<int64_t>(first) * p.num_q_heads + h0;
  const int64_t out_b = static_cast<int64_t>(b) * p.num_q_heads + h0;
  // One round trip, as main's merge: this thread's first output item of the first kPre - 1 other
  // units and its (m, l) words are all requested before any flag is looked at.
  constexpr int kPre = 16;
  uint64_t wv[kPre][4];
  const bool has_pre = tid < rows * D4;
  const uint64_t* part0 = ll + (row_b + tid / D4) * D + (tid % D4) * 4;
  if (has_pre) {
#pragma unroll
    for (int s = 0; s < kPre; ++s)
      if (s < NS - 1) {
        ll_load2(part0 + s * split_rows * D, wv[s][0], wv[s][1]);
        ll_load2(part0 + s * split_rows * D + 2, wv[s][2], wv[s][3]);
      }
  }
  float own_m = kNegInf, own_l = 0.f;
  if (tid < rows) {
    own_m = sm_L[tid] > 0.f ? sm_M[tid] : kNegInf;
    own_l = sm_L[tid];
  }
  if (tid < kRows) s_max[tid] = float_max_key(kNegInf);
  __syncthreads();  // sm_M / sm_L read before cw / cl overwrite them
  float* cw = reinterpret_cast<float*>(sWork);  // [NS][16]: m, then the weight
  float* cl = cw + kMaxUnits * kRows;          // [NS][16]: l
  if (tid < rows) {
    cw[(NS - 1) * kRows + tid] = own_m;
    cl[(NS - 1) * kRows + tid] = own_l;
    atomicMax(&s_max[tid], float_max_key(own_m));
  }
#pragma unroll 1
  for (int idx = tid; idx < (NS - 1) * rows; idx += C::kThreads) {
    const int s = idx / rows, r = idx % rows;
    const int64_t row = s * split_rows + row_b + r;
    const uint64_t* pm = ll + ws_rows * D + row;
    const uint64_t* pl = ll + ws_rows * (D + 1) + row;
    uint64_t wm = ll_load1(pm), wl = ll_load1(pl);
    for (int it = 0; !(ll_ok(wm, ll_flag) && ll_ok(wl, ll_flag)) && it < (1 << 22); ++it) {
      if (!ll_ok(wm, ll_flag)) wm = ll_load1(pm);
      if (!ll_ok(wl, ll_flag)) wl = ll_load1(pl);
    }
    cw[s * kRows + r] = ll_val(wm);
    cl[s * kRows + r] = ll_val(wl);
    atomicMax(&s_max[r], float_max_key(ll_val(wm)));
  }
  __syncthreads();
  for (int idx = tid; idx < NS * rows; idx += C::kThreads) {
    const int k = (idx / rows) * kRows + idx % rows;
    cw[k] = cl[k] * rescale(cw[k], max_key_float(s_max[idx % rows]));  // empty: l = 0
  }
  __syncthreads();
  for (int idx = tid; idx < rows * D4; idx += C::kThreads) {
    const int r = idx / D4, d = (idx % D4) * 4;
    const uint64_t* part = ll + (row_b + r) * D + d;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    float L = 0.f;
    auto add = [&](float4 x, float wt) {
      a.x = fmaf(x.x, wt, a.x);
      a.y = fmaf(x.y, wt, a.y);
      a.z = fmaf(x.z, wt, a.z);
      a.w = fmaf(x.w, wt, a.w);
      L += wt;
    };
    int s0 = 0;
    if (idx == tid && has_pre) {
#pragma unroll
      for (int s = 0; s < kPre; ++s)
        if (s < NS - 1) {
          for (int it = 0; !(ll_ok(wv[s][0], ll_flag) && ll_ok(wv[s][1], ll_flag) && ll_ok(wv[s][2], ll_flag) &&
                             ll_ok(wv[s][3], ll_flag)) && it < (1 << 22); ++it) {
            ll_load2(part + s * split_rows * D, wv[s][0], wv[s][1]);
            ll_load2(part + s * split_rows * D + 2, wv[s][2], wv[s][3]);
          }
          add(make_float4(ll_val(wv[s][0]), ll_val(wv[s][1]), ll_val(wv[s][2]), ll_val(wv[s][3])),
              cw[s * kRows + r]);
        }
      s0 = NS - 1 < kPre ? NS - 1 : kPre;
    }
    for (int s = s0; s < NS - 1; ++s) add(ll_wait4(part + s * split_rows * D, ll_flag), cw[s * kRows + r]);
    add(*reinterpret_cast<const float4*>(own + r * D + d), cw[(NS - 1) * kRows + r]);
    const float inv = finalize_scale(L);
    store4(out_b + r, d, make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv));
  }
  __syncthreads();
  if (tid == 0) *counter = static_cast<int>(ll_flag);  // the next launch's flag is this + 1
'''


def main() -> None:
    hip = Path(sys.argv[1])
    f = hip / "paged_decode_mma.cuh"
    s = f.read_text()
    assert s.count(LOOP) == 1 and s.count(OLD_START) == 1
    a = s.index(OLD_START)
    b = s.index(OLD_END) + len(OLD_END)
    s = s[:a] + NEW + s[b:]
    s = s.replace(LOOP, DECLS + LOOP)
    assert s.count(EPOCH_AFTER) == 1
    s = s.replace(EPOCH_AFTER, EPOCH)
    # helpers before the kernel template
    anchor = "template <class T, int PS, class C, bool kNarrow = false, class KV = T>\n__global__"
    assert s.count(anchor) == 1
    s = s.replace(anchor, "#if RK_NVIDIA\n" + HELPERS + "#endif\n" + anchor)
    f.write_text(s)
    print(f"rewrote {f}")


if __name__ == "__main__":
    main()
