#pragma once

// Per-row data of a tile of packed query rows, one entry per vector lane: which keys the row sees, its
// ALiBi slope and its dropout counters. The score/softmax code reads them 16 lanes (one strip) at a time.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/philox.h"
#include "cpu/flash/attn_job.h"
#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

struct RowLanes {
  int64_t n = 0;               // valid rows; lanes n..16*strips-1 are padding that sees no key
  int64_t strips = 0;          // strips_of(n)
  int32_t* query = nullptr;    // i
  int32_t* counter = nullptr;  // b * heads + h: the dropout counter of the row's head
  int32_t* key_begin = nullptr;
  int32_t* key_end = nullptr;
  int32_t* diagonal = nullptr;       // i + sk - sq: the key ALiBi measures distance from
  float* slope2 = nullptr;           // ALiBi slope in log2 units
  int64_t key_min = 0, key_max = 0;  // union of the visible ranges of the valid rows (empty: min >= max)

  static constexpr int64_t kArrays = 6;
};

// Fills lanes [0, 16 * strips) for packed rows [r0, r0 + n) of `s`, from storage carved at `mem`
// (kArrays * 16 * strips_of(n) words).
inline void fill_lanes(const AttnCall& c, const AttnSeq& s, int64_t r0, int64_t n, float* mem, RowLanes& out) {
  out.n = n;
  out.strips = strips_of(n);
  const int64_t lanes = out.strips * kLanes;
  int32_t* words = reinterpret_cast<int32_t*>(mem);
  out.query = words;
  out.counter = words + lanes;
  out.key_begin = words + 2 * lanes;
  out.key_end = words + 3 * lanes;
  out.diagonal = words + 4 * lanes;
  out.slope2 = mem + 5 * lanes;
  const Mask mask = s.mask(c);
  out.key_min = std::numeric_limits<int64_t>::max();
  out.key_max = 0;
  for (int64_t l = 0; l < lanes; ++l) {
    if (l < n) {
      const int64_t r = r0 + l, i = r / c.group, h = s.hk * c.group + r % c.group;
      out.query[l] = int32_t(i);
      out.counter[l] = int32_t(s.b * c.heads + h);
      out.key_begin[l] = int32_t(mask.key_begin(i));
      out.key_end[l] = int32_t(mask.key_end(i));
      out.diagonal[l] = int32_t(mask.diagonal(i));
      out.slope2[l] = alibi_slope(c.score, s.b, h) * kLog2e;
      if (out.key_begin[l] < out.key_end[l]) {
        out.key_min = std::min<int64_t>(out.key_min, out.key_begin[l]);
        out.key_max = std::max<int64_t>(out.key_max, out.key_end[l]);
      }
    } else {
      out.query[l] = out.counter[l] = out.key_begin[l] = out.key_end[l] = out.diagonal[l] = 0;
      out.slope2[l] = 0.0f;
    }
  }
  if (out.key_min >= out.key_max) out.key_min = out.key_max = 0;
}

// One strip of a RowLanes, in registers.
struct StripLanes {
  VecU query, counter, key_begin, key_end, diagonal;
  VecF slope2;
  // Whether keys [j0, j1) are visible to every valid row of the strip (no mask needed) / to none.
  bool all_visible = false, none_visible = false;
};

inline StripLanes strip_lanes(const RowLanes& r, int64_t strip, int64_t j0, int64_t j1) {
  const int64_t o = strip * kLanes;
  StripLanes s{load(r.query + o),   load(r.counter + o),  load(r.key_begin + o),
               load(r.key_end + o), load(r.diagonal + o), load(r.slope2 + o)};
  s.all_visible = s.none_visible = true;
  for (int64_t l = o; l < std::min(o + kLanes, r.n); ++l) {
    if (!(r.key_begin[l] <= j0 && j1 <= r.key_end[l])) s.all_visible = false;
    if (r.key_begin[l] < j1 && j0 < r.key_end[l] && r.key_begin[l] < r.key_end[l]) s.none_visible = false;
  }
  return s;
}

FLASH_INLINE LaneMask visible(const StripLanes& s, int64_t j) {
  const VecU jj = splat_u(uint32_t(j));
  return LaneMask(~less_i(jj, s.key_begin) & less_i(jj, s.key_end));
}

// Score modifiers on a strip of raw scores x (log2 units, q already scaled): softcap, then ALiBi.
// `t` receives tanh(x) for the softcap chain rule of backward.
template <bool Softcap, bool Alibi>
FLASH_INLINE VecF modify_scores(VecF x, const StripLanes& s, int64_t j, float cap2, VecF* t) {
  if constexpr (Softcap) {
    *t = tanh(x);
    x = *t * splat(cap2);
  }
  if constexpr (Alibi) x = x - s.slope2 * abs_to_float(s.diagonal - splat_u(uint32_t(j)));
  return x;
}

// Dropout: the keep decisions of the strip's 16 rows for key j, bit-identical to common/philox.h. The
// four words of a key group j/4 are drawn once and reused for its four keys.
struct DropoutLanes {
  const DropoutParams* d = nullptr;
  uint32_t threshold = 0;
  int64_t group = -1;
  Philox16 words{};

  FLASH_INLINE LaneMask keep(const StripLanes& s, int64_t j) {
    if ((j >> 2) != group) {
      group = j >> 2;
      const Philox16 ctr{splat_u(uint32_t(group)), s.query, s.counter, splat_u(uint32_t(d->offset))};
      words = philox16(ctr, uint32_t(d->seed), uint32_t(d->seed >> 32) ^ uint32_t(d->offset >> 32));
    }
    const VecU w = (j & 3) == 0 ? words.x : (j & 3) == 1 ? words.y : (j & 3) == 2 ? words.z : words.w;
    return greater_equal_u(w, splat_u(threshold));
  }
};

inline DropoutLanes dropout_lanes(const DropoutParams& d) { return DropoutLanes{&d, dropout_threshold(d.p)}; }

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
