#pragma once

// The online softmax of forward on one strip (16 query rows) of an S^T tile: bc keys x 16 rows, scores in
// log2 units. Because query rows are vector lanes, the row max and row sum are plain vertical max/add
// over the keys: no horizontal reductions anywhere.

#include <cstdint>

#include "cpu/flash/attn_job.h"
#include "cpu/flash/row_lanes.h"
#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// Running state of 16 rows: max m (log2 units, -inf before any visible key) and sum l of exp2(s - m).
struct SoftmaxState {
  float* m;
  float* l;
};

// Replaces the scores st[j * 16 + lane] (keys j0 + j, j < bc) by exp2(s - m_new), after softcap, ALiBi and
// (Masked) the visibility mask; updates m and l; returns the factor exp2(m_old - m_new) by which the
// rows' previous output accumulator must be scaled. Dropped probabilities are zeroed after they count in
// l: the LSE and the normaliser are those of the undropped softmax.
template <bool Softcap, bool Alibi, bool Masked>
VecF online_softmax_strip(const AttnCall& c, const StripLanes& lanes, int64_t j0, int64_t bc, float* st,
                          SoftmaxState state, DropoutLanes* dropout) {
  constexpr bool kModified = Softcap || Alibi || Masked;
  VecF tile_max = neg_infinity();
  for (int64_t j = 0; j < bc; ++j) {
    VecF x = load(st + j * kLanes);
    if constexpr (kModified) {
      VecF t;
      x = modify_scores<Softcap, Alibi>(x, lanes, j0 + j, c.cap2, &t);
      if constexpr (Masked) x = select(visible(lanes, j0 + j), x, neg_infinity());
      store(st + j * kLanes, x);
    }
    tile_max = max(tile_max, x);
  }
  const VecF m_old = load(state.m);
  const VecF m_new = max(m_old, tile_max);
  // A row that has seen no visible key yet keeps m = -inf; subtracting 0 instead keeps exp2 at 0, not NaN.
  const VecF m_use = select(equal(m_new, neg_infinity()), zeros(), m_new);
  VecF sum = zeros();
  for (int64_t j = 0; j < bc; ++j) {
    const VecF p = exp2(load(st + j * kLanes) - m_use);
    sum = sum + p;
    store(st + j * kLanes, dropout ? select(dropout->keep(lanes, j0 + j), p, zeros()) : p);
  }
  const VecF alpha = exp2(m_old - m_use);
  store(state.l, fma(load(state.l), alpha, sum));
  store(state.m, m_new);
  return alpha;
}

using OnlineSoftmaxFn = VecF (*)(const AttnCall&, const StripLanes&, int64_t, int64_t, float*, SoftmaxState,
                                 DropoutLanes*);

// The instantiation for a call's score modifiers and a tile's need for masking.
inline OnlineSoftmaxFn online_softmax_for(bool softcap, bool alibi, bool masked) {
  static constexpr OnlineSoftmaxFn table[2][2][2] = {
      {{online_softmax_strip<false, false, false>, online_softmax_strip<false, false, true>},
       {online_softmax_strip<false, true, false>, online_softmax_strip<false, true, true>}},
      {{online_softmax_strip<true, false, false>, online_softmax_strip<true, false, true>},
       {online_softmax_strip<true, true, false>, online_softmax_strip<true, true, true>}}};
  return table[softcap][alibi][masked];
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
