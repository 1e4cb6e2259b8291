#pragma once

// Logits and masking on MMA accumulator fragments. The semantics are those of common/score.h (ScoreMod
// for scale / softcap / ALiBi, Mask for visibility); this file only maps fragment elements to their
// (query, key) coordinates:
//   row-major S (forward, dQ kernel): element (f, e) of the 16-row fragment at rows r0.. and keys k0..
//     has query r0 + g + 8 (e / 2) and key k0 + 8 f + 2 t + e % 2;
//   transposed S^T (backward main kernel): element (f, e) of the 16-key fragment at keys k0.. and
//     queries q0.. has key k0 + g + 8 (e / 2) and query q0 + 8 f + 2 t + e % 2.
// Only tiles that straddle a mask boundary are masked (tile_range.h decides); the others skip this.

#include <cstdint>

#include "common/score.h"
#include "cuda/attn/score_args.h"

namespace flashattn::detail::cuda::attn {

inline constexpr float kNegInf = -__builtin_huge_valf();

// The logit transform of one (sequence, head) in base 2. `plain` (no softcap, no ALiBi) is the common
// case: one multiply by the host-computed softmax_scale * log2(e).
struct ScoreFn {
  ScoreMod<float> mod;
  float scale_log2;
  bool plain;

  __device__ static ScoreFn make(const ScoreParams& sp, const ScoreArgs& a, int64_t b, int64_t h) {
    const float slope = alibi_slope(sp, b, h);
    return ScoreFn{ScoreMod<float>{sp.softmax_scale, sp.softcap, slope}, a.scale_log2,
                   sp.softcap == 0.0f && slope == 0.0f};
  }
  // logit * log2(e) for a raw dot product at signed distance diagonal(i) - j.
  __device__ __forceinline__ float logit2(float qk, int64_t distance) const {
    return plain ? qk * scale_log2 : mod(qk, distance) * kLog2e;
  }
  // d logit / d qk (ScoreMod::dlogit_dqk: scale, times 1 - tanh^2 with softcap).
  __device__ __forceinline__ float dlogit(float qk) const { return plain ? mod.scale : mod.dlogit_dqk(qk); }
};

// Visible keys of query `row` relative to key0, clamped to [0, span] so the per-element test is a pair
// of int compares. Rows at or past `sq` see nothing (padding rows of a partial query tile).
struct RelRange {
  int begin, end;
};
__device__ __forceinline__ RelRange visible_rel(const Mask& m, int64_t row, int64_t key0, int span) {
  if (row >= m.sq) return RelRange{0, 0};
  const auto clamp = [span](int64_t v) { return int(v < 0 ? 0 : (v > span ? span : v)); };
  return RelRange{clamp(m.key_begin(row) - key0), clamp(m.key_end(row) - key0)};
}

// Row-major S of a warp: s[mf][f][e] for query rows row0 + 16 mf + .. and keys key0 + 8 f + ..
// Turns raw dot products into base-2 logits.
template <int kMFrags, int kNFrags>
__device__ __forceinline__ void logits_rowmajor(float (&s)[kMFrags][kNFrags][4], const ScoreFn& fn, const Mask& m,
                                                int64_t row0, int64_t key0, int lane) {
  if (fn.plain) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int f = 0; f < kNFrags; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mf][f][e] *= fn.scale_log2;
    return;
  }
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t diag = m.diagonal(row0 + 16 * mf + g + 8 * (e >> 1));
#pragma unroll
      for (int f = 0; f < kNFrags; ++f) s[mf][f][e] = fn.logit2(s[mf][f][e], diag - (key0 + 8 * f + 2 * t + (e & 1)));
    }
}

// Sets the logits of invisible (query, key) pairs of a row-major S to -inf.
template <int kMFrags, int kNFrags>
__device__ __forceinline__ void mask_rowmajor(float (&s)[kMFrags][kNFrags][4], const Mask& m, int64_t row0,
                                              int64_t key0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RelRange r = visible_rel(m, row0 + 16 * mf + g + 8 * half, key0, 8 * kNFrags);
#pragma unroll
      for (int f = 0; f < kNFrags; ++f)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = 8 * f + 2 * t + e;
          if (k < r.begin || k >= r.end) s[mf][f][2 * half + e] = kNegInf;
        }
    }
}

}  // namespace flashattn::detail::cuda::attn
