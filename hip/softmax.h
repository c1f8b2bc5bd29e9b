// softmax.h — the online-softmax state, in base 2, and how two states merge.
//
// A state summarises softmax attention over some set of keys for one query head:
//   m  running maximum of the scores seen, in log2 units (score * sm_scale * log2(e));
//   l  sum over keys of exp2(score - m);
//   o  sum over keys of exp2(score - m) * v  (unnormalised; the output is o / l).
// The empty state is m = -inf, l = 0, o = 0. Merging uses M = max(m_a, m_b) and scales each side
// by exp2(m_x - M); when both sides are empty M is -inf and (-inf) - (-inf) would be NaN, so the
// merge substitutes 0 for an infinite M ("safe max"): exp2(-inf - 0) = 0 keeps every weight 0 and
// the state empty. finalize() maps the empty state to a zero output rather than 0/0.
//
// Split-KV (docs/contract.md §4): partition p yields (m_p, l_p, O_p = o_p / l_p); the combined
// output is
//   O = sum_p w_p O_p,  w_p = l_p exp2(m_p - M) / sum_q l_q exp2(m_q - M),  M = max_p m_p,
// which equals the unsplit softmax exactly (up to rounding).
#pragma once

#include "platform.h"

namespace rk {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

RK_DEVICE float safe_max(float m) { return m == kNegInf ? 0.f : m; }

// Rescale factors to merge a state with running max `m_old` into one with max `m_new`.
RK_DEVICE float rescale(float m_old, float m_new) { return fast_exp2(m_old - safe_max(m_new)); }

// Combine weights of two states (m_a, l_a) and (m_b, l_b): returns M and sets the two scales.
RK_DEVICE float merge_scales(float m_a, float m_b, float& s_a, float& s_b) {
  const float M = fmaxf(m_a, m_b);
  s_a = rescale(m_a, M);
  s_b = rescale(m_b, M);
  return M;
}

RK_DEVICE float finalize_scale(float l) { return l > 0.f ? 1.f / l : 0.f; }

// A float as an int of the same order (for integer atomicMax): non-negative floats keep their
// bits, negative ones flip their magnitude bits. max_key_float inverts it.
RK_DEVICE int float_max_key(float f) {
  const int b = __float_as_int(f);
  return b >= 0 ? b : b ^ 0x7fffffff;
}
RK_DEVICE float max_key_float(int k) { return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff); }

// One step of the online max: folds a tile's maximum score into the running max `m`. Sets `ms`,
// the value the tile's exponentials subtract (the safe max), and `corr`, the factor the state so
// far is scaled by: 1 when the max did not grow (skipping the rescale is then exact), 0 when the
// state was empty. Returns whether the max grew.
RK_DEVICE bool online_max_step(float& m, float tile_max, float& ms, float& corr) {
  const float m_new = fmaxf(m, tile_max);
  ms = safe_max(m_new);
  const bool grew = m_new > m;
  corr = grew ? fast_exp2(m - ms) : 1.f;
  m = m_new;
  return grew;
}

}  // namespace rk
