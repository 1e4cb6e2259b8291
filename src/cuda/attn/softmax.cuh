#pragma once

// Online softmax in registers. SoftmaxRow holds its steps on one row of any accumulator layout (a row
// view); OnlineSoftmax applies them to m16n8 fragments for the sm80 forward. There a thread holds two
// query rows per 16-row fragment (g and g + 8) and, of each row, the 2 columns 2t, 2t+1 of every n8
// fragment; the 4 lanes of a quad (t = 0..3) hold the whole row, so row maxima are reduced with two
// __shfl_xor_sync (1, 2). Row sums stay per-thread partial sums until the epilogue: every lane of a quad
// rescales by the same factor, so the quad sum can be taken once at the end.
//
// Logits arrive in base 2 (log2(e) folded into the scale on the host), masked entries as -inf. A row
// that has seen no visible key yet has max -inf; it is offset by 0 instead, so exp2(-inf - 0) = 0 and
// no -inf - -inf = NaN appears (ex2.approx.ftz(-inf) = +0).

#include "cuda/attn/fragment_mask.cuh"
#include "cuda/common/ptx.h"

namespace flashattn::detail::cuda::attn {

// The steps of the online softmax on one row, whatever the accumulator's layout: a row view `at(c)`
// returns this thread's column c (of kCols) of the row, and the quad of lanes xor 1, 2 holds the rest of
// the row (m16n8 fragments and wgmma accumulators alike). The row's state (running max in logit units,
// -inf until it sees a visible key; the offset of the update in progress) is the caller's, so that each
// accumulator layout keeps it in the arrays its epilogue reads.
struct SoftmaxRow {
  // The maximum of the row over a tile (the quad's four lanes hold the row).
  template <int kCols, typename At>
  __device__ __forceinline__ static float tile_max(At&& at) {
    float raw = kNegInf;
#pragma unroll
    for (int c = 0; c < kCols; c += 2) raw = fmaxf(raw, fmaxf(at(c), at(c + 1)));
    raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 1));
    return fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 2));
  }
  // Folds the tile's row max (in logit units) into `max`, sets `offset` (the new max, or 0 for a row with
  // no visible key yet) and returns the factor of the row's earlier terms. FP8 would add its max offset
  // here.
  __device__ __forceinline__ static float begin(float& max, float& offset, float tile_max_logits) {
    const float mx = fmaxf(max, tile_max_logits);
    offset = mx == kNegInf ? 0.0f : mx;
    const float rescale = ptx::exp2_approx(max - offset);
    max = mx;
    return rescale;
  }
  // begin() that keeps the running max while the tile's max exceeds it by at most `slack` (base-2 logit
  // units): P then reaches up to 2^slack instead of 1, and the earlier terms keep their factor of 1, so O's
  // rescale can be skipped (the caller's warp vote) on most tiles instead of only once no row max grows.
  // Exact either way: every term and the row sum are relative to the same offset, and the LSE and the
  // output divide it out. slack = 0 moves the max on any growth, as begin() does.
  // Written as begin() with another choice of the new max (no branch): an unmoved max gives exp2(0) = 1.
  __device__ __forceinline__ static float begin_lazy(float& max, float& offset, float tile_max_logits, float slack) {
    const float mx = tile_max_logits > max + slack ? tile_max_logits : max;
    offset = mx == kNegInf ? 0.0f : mx;
    const float rescale = ptx::exp2_approx(max - offset);
    max = mx;
    return rescale;
  }
  // P = exp2(scale * s - offset) of one score.
  __device__ __forceinline__ static float exp(float s, float scale, float offset) {
    return ptx::exp2_approx(fmaf(s, scale, -offset));
  }
};

// The online softmax of m16n8 accumulator fragments s[mf][f][e] (rows g and g + 8 of each 16-row fragment
// row mf: `half` 0 and 1; columns 2t, 2t + 1 of each n8 fragment f), built on SoftmaxRow.
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

  // The maximum of row `half` of fragment row mf over the tile.
  template <int kNFrags>
  __device__ __forceinline__ static float tile_row_max(const float (&s)[kMFrags][kNFrags][4], int mf, int half) {
    return SoftmaxRow::tile_max<2 * kNFrags>([&](int c) { return s[mf][c >> 1][2 * half + (c & 1)]; });
  }

  // Folds a tile into the running max/sum: the base-2 logits are scale * s (scale > 0; 1 when s already
  // holds logits). s becomes P = exp2(scale * s - max) (fp32), one FFMA and one ex2 per element, and
  // `rescale` the factor by which the O accumulator of each row must be multiplied before adding P V.
  // kLazyMax: the running max moves only when a tile's max exceeds it by more than `slack`
  // (SoftmaxRow::begin_lazy). p_log2: P (and so the row sums) come out times 2^p_log2, exactly, the factor
  // folded into the exponent (the FP8 forward's P scale, which would otherwise cost a multiply an element).
  template <int kNFrags, bool kLazyMax = false>
  __device__ __forceinline__ void update(float (&s)[kMFrags][kNFrags][4], float (&rescale)[kMFrags][2], float scale,
                                         float slack = 0.0f, float p_log2 = 0.0f) {
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float offset;
        const float tile_max = tile_row_max(s, mf, half) * scale;
        rescale[mf][half] = kLazyMax ? SoftmaxRow::begin_lazy(row_max[mf][half], offset, tile_max, slack)
                                     : SoftmaxRow::begin(row_max[mf][half], offset, tile_max);
        float sum = 0.0f;
        const float exponent_offset = offset - p_log2;
#pragma unroll
        for (int f = 0; f < kNFrags; ++f)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = SoftmaxRow::exp(s[mf][f][2 * half + e], scale, exponent_offset);
            s[mf][f][2 * half + e] = p;
            sum += p;
          }
        row_sum[mf][half] = row_sum[mf][half] * rescale[mf][half] + sum;
      }
  }

  // update() in three parts, for a caller that computes P fragment by fragment inside the P V product
  // (sm80/fwd_mainloop.cuh, pv_exp): begin_update takes the tile's row maxima and sets `rescale`; exp_frag
  // turns n8 fragment f of fragment row mf into P and adds it to the tile's partial row sums; end_update
  // folds those into the running sums once every fragment is done. Each row sum adds the same terms in the
  // same order (fragments ascending, then columns) as one update() call, so the results are the same bits
  // by construction. update() keeps its fused form: written as these three parts, the instances that use
  // it compile to a different schedule.
  template <int kNFrags>
  __device__ __forceinline__ void begin_update(const float (&s)[kMFrags][kNFrags][4], float (&rescale)[kMFrags][2],
                                               float scale) {
    scale_ = scale;
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        rescale[mf][half] = SoftmaxRow::begin(row_max[mf][half], offset_[mf][half], tile_row_max(s, mf, half) * scale);
        tile_sum_[mf][half] = 0.0f;
      }
  }
  template <int kNFrags>
  __device__ __forceinline__ void exp_frag(float (&s)[kMFrags][kNFrags][4], int mf, int f) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = SoftmaxRow::exp(s[mf][f][2 * half + e], scale_, offset_[mf][half]);
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
