#pragma once

// Device code shared by the SIMT FlashAttention kernels (FA1 and FA2): a K/V tile staged in shared memory
// as fp32, and the online softmax of one query row against such a tile. The two kernels differ only in
// the loop order around these pieces and in where a row's running state lives between tiles (registers
// for FA2, a global workspace for FA1).
//
// Thread layout (simt_tile.h): row = threadIdx.x / lanes, lane = threadIdx.x % lanes; lane g holds dims
// 4c..4c+3 for the chunks c = g + lanes * t, t < vecs_per_lane.

#include <cstdint>

#include "common/philox.h"
#include "common/score.h"
#include "cuda/common/elem.cuh"
#include "cuda/ladder/ladder.h"
#include "cuda/ladder/simt_tile.h"

namespace flashattn::detail::cuda::ladder {

template <int kHeadDim>
struct Layout {
  static constexpr SimtTile kTile = simt_tile(kHeadDim);
  static constexpr int kLanes = kTile.lanes;
  static constexpr int kVecs = kTile.vecs_per_lane();
  static constexpr int kDims = 4 * kVecs;  // dims of q and of the accumulator held by one lane
  static constexpr int kRows = kTile.rows;
  static constexpr int kKeys = kTile.keys;
  static constexpr int kRowVecs = kHeadDim / 4;  // float4 words per shared-memory K/V row

  // First dim of the lane's t-th float4 chunk.
  __device__ static int dim(int lane, int t) { return 4 * (lane + kLanes * t); }
};

// One lane's share of a query row's online-softmax state.
template <int kDims>
struct RowAcc {
  float o[kDims];  // unnormalised output: sum over keys of (dropped) exp(logit - m) * v
  float m;         // running max of the logits; -inf until a visible key was seen
  float l;         // running sum of exp(logit - m) without dropout: the LSE is of the undropped softmax
};

// Everything a row needs to turn q.k into a probability: which keys it sees, how logits are modified,
// and its dropout stream.
struct RowCtx {
  int64_t key_begin = 0, key_end = 0;  // visible keys [key_begin, key_end); empty when key_end <= key_begin
  int64_t diagonal = 0;                // key aligned with this query (ALiBi distance origin)
  ScoreMod<float> mod;
  bool dropout = false;
  DropoutParams drop;
  int64_t b = 0, h = 0, heads = 0, i = 0;  // dropout counter: sequence, query head, head count, local row
  uint32_t threshold = 0;
  float keep_scale = 1.0f;
};

// The context of local query row i of sequence b, head h. An inactive row (beyond the sequence, present
// only to fill the block) sees no key.
__device__ __forceinline__ RowCtx make_row_ctx(const FwdProblem& p, const SimtArgs& a, const Mask& mask, int64_t b,
                                               int64_t h, int64_t i, bool active) {
  RowCtx c;
  if (active) {
    c.key_begin = mask.key_begin(i);
    c.key_end = mask.key_end(i);
  }
  c.diagonal = mask.diagonal(i);
  c.mod = ScoreMod<float>{p.score.softmax_scale, p.score.softcap, alibi_slope(p.score, b, h)};
  c.dropout = a.dropout;
  c.drop = p.dropout;
  c.b = b;
  c.h = h;
  c.heads = p.heads;
  c.i = i;
  c.threshold = a.drop_threshold;
  c.keep_scale = a.keep_scale;
  return c;
}

// Reads the lane's dims of a row of a (.., head_dim) tensor of T as fp32; padding dims read as 0.
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_row(const T* row, int head_dim, int lane, float (&vals)[Layout<kHeadDim>::kDims]) {
  using L = Layout<kHeadDim>;
#pragma unroll
  for (int t = 0; t < L::kVecs; ++t) {
    const int d0 = L::dim(lane, t);
#pragma unroll
    for (int c = 0; c < 4; ++c) vals[4 * t + c] = d0 < head_dim ? to_float(row[d0 + c]) : 0.0f;
  }
}

// Writes the lane's dims of `vals * scale` to a row of a (.., head_dim) tensor of T; dims >= head_dim
// are padding and not written (head_dim is a multiple of 8, so a chunk is all in or all out).
template <int kHeadDim, typename T>
__device__ __forceinline__ void store_row(T* row, int head_dim, int lane, const float (&vals)[Layout<kHeadDim>::kDims],
                                          float scale) {
  using L = Layout<kHeadDim>;
#pragma unroll
  for (int t = 0; t < L::kVecs; ++t) {
    const int d0 = L::dim(lane, t);
    if (d0 < head_dim) {
#pragma unroll
      for (int c = 0; c < 4; ++c) row[d0 + c] = from_float<T>(vals[4 * t + c] * scale);
    }
  }
}

// The whole block copies kKeys rows of K or V, starting at `src` (element (row 0, dim 0) of the tile,
// rows `row_stride` apart), into shared memory as fp32 [kKeys][kHeadDim]. Rows >= n_valid and dims >=
// head_dim are zero-filled: those keys are masked, but 0 * garbage could still be NaN in P.V.
template <int kHeadDim, int kKeys, typename T>
__device__ __forceinline__ void load_kv_tile(const T* src, int64_t row_stride, int n_valid, int head_dim, bool vec16,
                                             float* dst) {
  constexpr int kPer = kElemsPer16B<T>;  // elements per 16-byte access; head dims are multiples of 8
  constexpr int kPerRow = kHeadDim / kPer;
  static_assert(kHeadDim % kPer == 0 && kPer % 4 == 0, "tile rows are whole 16-byte accesses");
  for (int idx = threadIdx.x; idx < kKeys * kPerRow; idx += blockDim.x) {
    const int r = idx / kPerRow;
    const int d0 = (idx % kPerRow) * kPer;
    float vals[kPer];
    if (r < n_valid && d0 < head_dim) {
      const T* s = src + int64_t(r) * row_stride + d0;
      if (vec16) {
        load16_as_float(s, vals);
      } else {
#pragma unroll
        for (int c = 0; c < kPer; ++c) vals[c] = to_float(s[c]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kPer; ++c) vals[c] = 0.0f;
    }
    float4* out = reinterpret_cast<float4*>(dst + r * kHeadDim + d0);
#pragma unroll
    for (int c = 0; c < kPer / 4; ++c)
      out[c] = make_float4(vals[4 * c], vals[4 * c + 1], vals[4 * c + 2], vals[4 * c + 3]);
  }
}

// The lane's share of the dot product of a row held in registers (`a`, the lane's dims) with one
// shared-memory row (`row`: the lane's first float4 of it). Every logit of the SIMT kernels is scored
// here, forward and backward: cuda_fa2_simt's backward recomputes P = exp(logit - LSE) with the forward's
// LSE, and a logit summed in another order there (it once summed each float4 backwards) is rounded
// differently, so P no longer matches the LSE. That put dV, whose criterion is the tightest, outside
// flash-attn's criterion (docs/reliability.md, numerics tests). Four chains, one per float4 component,
// added as (x + y) + (z + w): each chain sums kVecs products instead of one chain summing 4 * kVecs, which
// keeps the fp32 rounding of large logits (|q.k| ~ 1e3 at softmax_scale -1) within the criterion too.
template <int kHeadDim>
__device__ __forceinline__ float lane_dot(const float4* row, const float (&a)[Layout<kHeadDim>::kDims]) {
  using L = Layout<kHeadDim>;
  float x = 0.0f, y = 0.0f, z = 0.0f, w = 0.0f;
#pragma unroll
  for (int t = 0; t < L::kVecs; ++t) {
    const float4 r = row[t * L::kLanes];
    x = fmaf(a[4 * t], r.x, x);
    y = fmaf(a[4 * t + 1], r.y, y);
    z = fmaf(a[4 * t + 2], r.z, z);
    w = fmaf(a[4 * t + 3], r.w, w);
  }
  return (x + y) + (z + w);
}

// Online softmax of one row against the keys [n0, n0 + n_valid) staged in `ks`/`vs` (keys beyond
// n_valid, up to the next multiple of kKeyChunk, must be zero-filled rows of the tile). n_valid must be
// the same for every thread of the block, and every lane of the warp must call this (it shuffles).
// n0 must be a multiple of 4: dropout draws one Philox block per 4 aligned keys.
template <int kHeadDim>
__device__ __forceinline__ void attend_tile(const float* ks, const float* vs, int64_t n0, int n_valid, int lane,
                                            const float (&q)[Layout<kHeadDim>::kDims],
                                            RowAcc<Layout<kHeadDim>::kDims>& acc, const RowCtx& ctx) {
  using L = Layout<kHeadDim>;
  const float4* k4 = reinterpret_cast<const float4*>(ks) + lane;
  const float4* v4 = reinterpret_cast<const float4*>(vs) + lane;
  for (int c0 = 0; c0 < n_valid; c0 += kKeyChunk) {
    float s[kKeyChunk];
#pragma unroll
    for (int kk = 0; kk < kKeyChunk; ++kk) {
      s[kk] = lane_dot<kHeadDim>(k4 + (c0 + kk) * L::kRowVecs, q);
    }
    // Sum the lanes' partial dot products. Each butterfly step adds the same two values in both lanes
    // (addition commutes), so every lane of the row ends with the bitwise-identical total, and so with
    // identical m and l below.
#pragma unroll
    for (int off = L::kLanes / 2; off > 0; off /= 2) {
#pragma unroll
      for (int kk = 0; kk < kKeyChunk; ++kk) s[kk] += __shfl_xor_sync(0xffffffffu, s[kk], off);
    }
    float chunk_max = -INFINITY;
    bool nan_logit = false;
#pragma unroll
    for (int kk = 0; kk < kKeyChunk; ++kk) {
      const int64_t j = n0 + c0 + kk;
      s[kk] = (j >= ctx.key_begin && j < ctx.key_end) ? ctx.mod(s[kk], ctx.diagonal - j) : -INFINITY;
      chunk_max = fmaxf(chunk_max, s[kk]);
      nan_logit = nan_logit || s[kk] != s[kk];
    }
    // A visible NaN logit makes the row NaN (docs/reliability.md). fmaxf drops NaN, so without this a
    // row of NaN logits would look empty and output 0; NaN in l and o is sticky through the rescaling.
    if (nan_logit) {
      acc.l = NAN;
#pragma unroll
      for (int d = 0; d < L::kDims; ++d) acc.o[d] = NAN;
      continue;
    }
    const float m_new = fmaxf(acc.m, chunk_max);
    if (m_new == -INFINITY) continue;              // no visible key so far: the state stays empty
    const float correction = expf(acc.m - m_new);  // 0 when acc.m is still -inf
    acc.m = m_new;
    acc.l *= correction;
#pragma unroll
    for (int d = 0; d < L::kDims; ++d) acc.o[d] *= correction;
    Philox4 words{};
#pragma unroll
    for (int kk = 0; kk < kKeyChunk; ++kk) {
      const float prob = expf(s[kk] - m_new);  // 0 for masked keys (s = -inf)
      acc.l += prob;
      float weight = prob;
      if (ctx.dropout) {
        const int64_t j = n0 + c0 + kk;
        if (kk % 4 == 0) words = dropout_words(ctx.drop, ctx.b, ctx.h, ctx.heads, ctx.i, j);
        weight = philox_word(words, j) >= ctx.threshold ? prob * ctx.keep_scale : 0.0f;
      }
      const float4* vr = v4 + (c0 + kk) * L::kRowVecs;
#pragma unroll
      for (int t = 0; t < L::kVecs; ++t) {
        const float4 vv = vr[t * L::kLanes];
        acc.o[4 * t] = fmaf(weight, vv.x, acc.o[4 * t]);
        acc.o[4 * t + 1] = fmaf(weight, vv.y, acc.o[4 * t + 1]);
        acc.o[4 * t + 2] = fmaf(weight, vv.z, acc.o[4 * t + 2]);
        acc.o[4 * t + 3] = fmaf(weight, vv.w, acc.o[4 * t + 3]);
      }
    }
  }
}

// fp32 per-row workspaces (FA1's accumulators, the backward's dO.O) use the packed query-row order of
// the (total_q, heads, ...) layout: row b * seqlen_q + i when dense, cu_seqlens_q[b] + i when varlen.
__device__ __forceinline__ int64_t packed_q_row(const FwdProblem& p, const SeqRange& r, int64_t b, int64_t i) {
  return p.cu_seqlens_q != nullptr ? r.q_start + i : b * p.seqlen_q + i;
}

// The inverse for tensor addressing: view.offset(b, row, h) of the returned pair addresses packed row
// `packed` (varlen views have batch_stride 0, so the packed row itself is the row).
struct TensorRow {
  int64_t b, row;
};
__device__ __forceinline__ TensorRow unpack_q_row(const FwdProblem& p, int64_t packed) {
  if (p.cu_seqlens_q != nullptr) return TensorRow{0, packed};
  return TensorRow{packed / p.seqlen_q, packed % p.seqlen_q};
}

// Output scale and LSE of a finished row: out = o / l, LSE = m + log(l); a row that saw no key gets
// out 0 and LSE +inf.
__device__ __forceinline__ float row_out_scale(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
__device__ __forceinline__ float row_lse(float m, float l) { return l > 0.0f ? m + logf(l) : INFINITY; }

}  // namespace flashattn::detail::cuda::ladder
