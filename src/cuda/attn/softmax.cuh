#pragma once

// Online softmax of the forward kernel, in registers. A thread holds two query rows per 16-row fragment
// (g and g + 8) and, of each row, the 2 columns 2t, 2t+1 of every n8 fragment; the 4 lanes of a quad
// (t = 0..3) hold the whole row, so row maxima are reduced with two __shfl_xor_sync (1, 2). Row sums stay
// per-thread partial sums until the epilogue: every lane of a quad rescales by the same factor, so the
// quad sum can be taken once at the end.
//
// Logits arrive in base 2 (log2(e) folded into the scale on the host), masked entries as -inf. A row
// that has seen no visible key yet has max -inf; it is offset by 0 instead, so exp2(-inf - 0) = 0 and
// no -inf - -inf = NaN appears (ex2.approx.ftz(-inf) = +0).

#include "cuda/attn/fragment_mask.cuh"
#include "cuda/common/ptx.h"

namespace flashattn::detail::cuda::attn {

template <int kMFrags>
struct OnlineSoftmax {
  float row_max[kMFrags][2];
  float row_sum[kMFrags][2];  // partial: this thread's columns only
  // State of one update between begin_update and end_update.
  float offset_[kMFrags][2];    // the new row max (0 for a row with no visible key yet)
  float tile_sum_[kMFrags][2];  // this tile's P, this thread's columns
  float scale_;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        row_max[mf][half] = kNegInf;
        row_sum[mf][half] = 0.0f;
      }
  }

  // The maximum of row `half` of fragment row mf over the tile (the quad's four lanes hold the row).
  template <int kNFrags>
  __device__ __forceinline__ static float tile_row_max(const float (&s)[kMFrags][kNFrags][4], int mf, int half) {
    float raw = kNegInf;
#pragma unroll
    for (int f = 0; f < kNFrags; ++f) raw = fmaxf(raw, fmaxf(s[mf][f][2 * half], s[mf][f][2 * half + 1]));
    raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 1));
    return fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 2));
  }

  // Folds a tile into the running max/sum: the base-2 logits are scale * s (scale > 0; 1 when s already
  // holds logits). s becomes P = exp2(scale * s - max) (fp32), one FFMA and one ex2 per element, and
  // `rescale` the factor by which the O accumulator of each row must be multiplied before adding P V.
  // row_max is kept in logit units.
  template <int kNFrags>
  __device__ __forceinline__ void update(float (&s)[kMFrags][kNFrags][4], float (&rescale)[kMFrags][2], float scale) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float mx = fmaxf(row_max[mf][half], tile_row_max(s, mf, half) * scale);
        const float offset = mx == kNegInf ? 0.0f : mx;
        rescale[mf][half] = ptx::exp2_approx(row_max[mf][half] - offset);
        row_max[mf][half] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int f = 0; f < kNFrags; ++f)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = ptx::exp2_approx(fmaf(s[mf][f][2 * half + e], scale, -offset));
            s[mf][f][2 * half + e] = p;
            sum += p;
          }
        row_sum[mf][half] = row_sum[mf][half] * rescale[mf][half] + sum;
      }
  }

  // update() in three parts, for a caller that computes P fragment by fragment inside the P V product
  // (fwd_mainloop.cuh, pv_exp): begin_update takes the tile's row maxima and sets `rescale`; exp_frag turns
  // n8 fragment f of fragment row mf into P and adds it to the tile's partial row sums; end_update folds
  // those into the running sums once every fragment is done. Each row sum adds the same terms in the same
  // order (fragments ascending, then columns) as one update() call, so the results are the same bits by
  // construction.
  // update() keeps its fused form: written as these three parts, the instances that use it compile to a
  // different schedule.
  template <int kNFrags>
  __device__ __forceinline__ void begin_update(const float (&s)[kMFrags][kNFrags][4], float (&rescale)[kMFrags][2],
                                               float scale) {
    scale_ = scale;
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float mx = fmaxf(row_max[mf][half], tile_row_max(s, mf, half) * scale);
        offset_[mf][half] = mx == kNegInf ? 0.0f : mx;
        rescale[mf][half] = ptx::exp2_approx(row_max[mf][half] - offset_[mf][half]);
        row_max[mf][half] = mx;
        tile_sum_[mf][half] = 0.0f;
      }
  }
  template <int kNFrags>
  __device__ __forceinline__ void exp_frag(float (&s)[kMFrags][kNFrags][4], int mf, int f) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = ptx::exp2_approx(fmaf(s[mf][f][2 * half + e], scale_, -offset_[mf][half]));
        s[mf][f][2 * half + e] = p;
        tile_sum_[mf][half] += p;
      }
  }
  __device__ __forceinline__ void end_update(const float (&rescale)[kMFrags][2]) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        row_sum[mf][half] = row_sum[mf][half] * rescale[mf][half] + tile_sum_[mf][half];
  }

  // The full row sum (quad reduction); call once, after the last tile.
  __device__ __forceinline__ void reduce_sums() {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float l = row_sum[mf][half];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        row_sum[mf][half] = l;
      }
  }

  // After reduce_sums: natural-log LSE of a row (+inf when it saw no visible key) and the factor that
  // turns its O accumulator into the output (0 for such rows, which output 0).
  __device__ __forceinline__ float lse(int mf, int half) const {
    const float l = row_sum[mf][half];
    return l > 0.0f ? row_max[mf][half] * kLn2 + logf(l) : __builtin_huge_valf();
  }
  __device__ __forceinline__ float out_scale(int mf, int half, float keep_scale) const {
    const float l = row_sum[mf][half];
    return l > 0.0f ? keep_scale / l : 0.0f;
  }
};

}  // namespace flashattn::detail::cuda::attn
