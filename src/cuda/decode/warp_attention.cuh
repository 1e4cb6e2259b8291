#pragma once

// One warp's share of one K/V tile: S = Q K^T on its 16 rows and kWarpKeys keys (mma.m16n8k16, fp32
// accumulators), logits in base-2 units with the call's mask and score mod, the online-softmax update of
// its rows, and O += P V. Fragment layouts are those of cuda/common/ptx.h; with g = lane / 4 and
// t = lane % 4, this thread holds rows g and g + 8 of the warp's row tile ("row slot" 0 and 1):
//   s[j][0..1] = S[g][8j + 2t, +1]   s[j][2..3] = S[g + 8][8j + 2t, +1]       (keys of n-tile j)
//   o[j][0..1] = O[g][8j + 2t, +1]   o[j][2..3] = O[g + 8][8j + 2t, +1]       (dims of d-tile j)
// m, l of a slot are the running max (base-2 logits) and sum of 2^(logit - m) over this thread's
// columns; m is kept equal across the 4 threads of a row (a quad), l is summed over the quad only at
// the end, which is valid because every rescaling factor is quad-uniform.

#include <cmath>
#include <cstdint>

#include "common/score.h"
#include "cuda/attn/score_args.h"
#include "cuda/common/ptx.h"
#include "cuda/decode/decode_tile.h"
#include "cuda/decode/tile_loader.cuh"

namespace flashattn::detail::cuda::decode {

using attn::kLn2;
using attn::kLog2e;

// What this thread needs about its two rows to turn a dot product into a masked base-2 logit.
struct RowSlots {
  int key_begin[2], key_end[2];  // visible keys [key_begin, key_end)
  int diagonal[2];               // key aligned with the row's query (ALiBi distance origin)
  ScoreMod<float> mod[2];        // used when DecodeArgs::score_mod
  float scale_log2;              // used otherwise: DecodeArgs::scale_log2 times the FP8 k descale factor
};

template <typename Tile>
struct WarpState {
  float o[Tile::kHeadDim / 8][4];  // unnormalised output: sum over keys of 2^(logit - m) v
  float m[2];                      // -inf until a visible key was seen
  float l[2];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int j = 0; j < Tile::kHeadDim / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      m[k] = -INFINITY;
      l[k] = 0.0f;
    }
  }
};

// The masked base-2 logits of s (a warp's 16 rows x kWarpKeys keys from first_key on, in the layout of
// mma.m16n8 C fragments), the online-softmax update of the warp's rows, and s turned into the
// unnormalised probabilities 2^(logit - m) that O += P V takes. `full`: every key is visible to every row.
template <typename Tile>
__device__ __forceinline__ void softmax_tile(float (&s)[Tile::kWarpKeys / 8][4], int first_key, bool full,
                                             const RowSlots& rs, const DecodeArgs& a, int lane, WarpState<Tile>& st) {
  constexpr int kNTiles = Tile::kWarpKeys / 8;
  constexpr int kDTiles = Tile::kHeadDim / 8;
  // Base-2 logits; hidden keys (window, causal, past the sequence, zero-filled rows) become -inf.
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int slot = e >> 1;
      const int key = first_key + 8 * j + 2 * t + (e & 1);
      float x = s[j][e];
      x = a.score_mod ? rs.mod[slot](x, rs.diagonal[slot] - key) * kLog2e : x * rs.scale_log2;
      if (!full && (key < rs.key_begin[slot] || key >= rs.key_end[slot])) x = -INFINITY;
      s[j][e] = x;
    }

  // Online softmax. The exponent base is 0 while a row has seen no visible key, so that -inf - -inf
  // never occurs; ex2(-inf) = 0 then zeroes the (empty) history and every hidden key.
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
  }
  float base[2], corr[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    tile_max[k] = fmaxf(tile_max[k], __shfl_xor_sync(0xffffffffu, tile_max[k], 1));
    tile_max[k] = fmaxf(tile_max[k], __shfl_xor_sync(0xffffffffu, tile_max[k], 2));
    const float m_new = fmaxf(st.m[k], tile_max[k]);
    base[k] = m_new == -INFINITY ? 0.0f : m_new;
    corr[k] = ptx::exp2_approx(st.m[k] - base[k]);
    st.m[k] = m_new;
    st.l[k] *= corr[k];
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = ptx::exp2_approx(s[j][e] - base[e >> 1]);
      s[j][e] = pr;
      st.l[e >> 1] += pr;
    }
  // Once a row's maximum settles, corr is exactly 1 (2^0) tile after tile: the warp skips the rescale
  // of its 16 x kHeadDim accumulator when no row of it changed (the same bits, ~kHeadDim / 2 fewer
  // multiplies per thread and tile).
  if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
      st.o[j][0] *= corr[0];
      st.o[j][1] *= corr[0];
      st.o[j][2] *= corr[1];
      st.o[j][3] *= corr[1];
    }
  }
}

// Attends the warp's rows (row warp rw) to its keys (key warp kw) of the tile whose first key is n0.
// `full`: every row of the block sees every key of the tile, so the mask test is skipped.
template <typename Tile, typename T>
__device__ __forceinline__ void attend_tile(const T* q_smem, const T* k_tile, const T* v_tile, int n0, bool full,
                                            const RowSlots& rs, const DecodeArgs& a, int rw, int kw, int lane,
                                            WarpState<Tile>& st) {
  constexpr int kD = Tile::kHeadDim;
  constexpr int kNTiles = Tile::kWarpKeys / 8;  // n-tiles of S (8 keys each)
  constexpr int kKSteps = kD / 16;              // k-steps of Q K^T (16 dims each)
  constexpr int kDTiles = kD / 8;               // n-tiles of O (8 dims each)
  const int key0 = kw * Tile::kWarpKeys;        // the warp's first key within the tile

  float s[kNTiles][4];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;

  // S = Q K^T. A (Q, 16 x 16 per k-step) by ldmatrix.x4: matrices (rows 0-7 | 8-15) x (dims 0-7 | 8-15)
  // in the order a0..a3, so lane l addresses row (l % 8) + 8 ((l / 8) % 2), chunk 2 kk + l / 16.
  // B (K^T, 16 dims x 8 keys) is K row-major = B "col" layout: one x4 gives b0, b1 of n-tiles 2jp and
  // 2jp + 1, matrices (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 0-7),
  // (keys 8-15, dims 8-15): lane l addresses key (l % 8) + 8 (l / 16), chunk 2 kk + (l / 8) % 2.
  const int q_row = rw * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int k_row = key0 + (lane & 7) + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t qa[4];
    ptx::ldmatrix_x4(qa, ptx::smem_addr(q_smem + swizzled<kD>(q_row, 2 * kk + (lane >> 4))));
#pragma unroll
    for (int jp = 0; jp < kNTiles / 2; ++jp) {
      uint32_t kb[4];
      ptx::ldmatrix_x4(kb, ptx::smem_addr(k_tile + swizzled<kD>(k_row + 16 * jp, 2 * kk + ((lane >> 3) & 1))));
      const uint32_t b0[2] = {kb[0], kb[1]};
      const uint32_t b1[2] = {kb[2], kb[3]};
      ptx::mma_16816<T>(s[2 * jp], qa, b0);
      ptx::mma_16816<T>(s[2 * jp + 1], qa, b1);
    }
  }

  softmax_tile<Tile>(s, n0 + key0, full, rs, a, lane, st);

  // O += P V. The S accumulator of n-tiles 2kk, 2kk + 1 is exactly the A fragment of keys
  // [16 kk, 16 kk + 16): a0 = s[2kk][0..1], a1 = s[2kk][2..3], a2 = s[2kk+1][0..1], a3 = s[2kk+1][2..3].
  // B (V, 16 keys x 8 dims) is row-major in shared memory, so ldmatrix.trans: one x4 gives b0, b1 of
  // d-tiles 2dp and 2dp + 1, matrices (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims
  // 8-15), (keys 8-15, dims 8-15): lane l addresses key (l % 8) + 8 ((l / 8) % 2), chunk 2 dp + l / 16.
  const int v_row = key0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < Tile::kWarpKeys / 16; ++kk) {
    const uint32_t pa[4] = {ptx::pack2<T>(s[2 * kk][0], s[2 * kk][1]), ptx::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                            ptx::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            ptx::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      uint32_t vb[4];
      ptx::ldmatrix_x4_trans(vb, ptx::smem_addr(v_tile + swizzled<kD>(v_row + 16 * kk, 2 * dp + (lane >> 4))));
      const uint32_t b0[2] = {vb[0], vb[1]};
      const uint32_t b1[2] = {vb[2], vb[3]};
      ptx::mma_16816<T>(st.o[2 * dp], pa, b0);
      ptx::mma_16816<T>(st.o[2 * dp + 1], pa, b1);
    }
  }
}

// Writes the warp's state for the epilogue: the unnormalised output rows into o_stage (row stride
// kOStride floats, key warp kw's rows after those of warps 0..kw-1), m and the quad-summed l per row.
template <typename Tile>
__device__ __forceinline__ void stage_warp_state(WarpState<Tile>& st, int rw, int kw, int lane, float* o_stage,
                                                 float* m_stage, float* l_stage) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    st.l[k] += __shfl_xor_sync(0xffffffffu, st.l[k], 1);
    st.l[k] += __shfl_xor_sync(0xffffffffu, st.l[k], 2);
    const int row = kw * Tile::kRows + rw * 16 + g + 8 * k;
    float* dst = o_stage + row * Tile::kOStride + 2 * t;
#pragma unroll
    for (int j = 0; j < Tile::kHeadDim / 8; ++j)
      *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(st.o[j][2 * k], st.o[j][2 * k + 1]);
    if (t == 0) {
      m_stage[row] = st.m[k];
      l_stage[row] = st.l[k];
    }
  }
}

}  // namespace flashattn::detail::cuda::decode
