#pragma once

// FlashAttention-2 forward on Volta's tensor cores (mma.sync.m8n8k4, f16 in, f32 accumulate). One CTA per
// (query tile of 64 rows, head, sequence), four warps of 16 rows, the tiles of a head side by side and the
// heavier causal tiles first. Per K/V tile:
//   all threads: K and V rows -> shared memory (16-byte loads, rows past the sequence and dims past
//                head_dim zero)                                                        -> barrier
//   each warp:   S = Q K^T (16 x block_n, A and B read from shared memory per k-step), logits, mask,
//                online softmax in registers, O rescaled; P -> the warp's f16 buffer      -> __syncwarp
//                O += P V (A = P from that buffer, dropout applied to it as it is read)
// sm_70 has neither cp.async nor ldmatrix: loads are plain vector loads, which the barrier orders, so
// the load of tile n+1 does not overlap the products of tile n in this version.
//
// The same kernel serves flash_attn_with_kvcache (CacheArgs): only where its rows live differs
// (fwd_rows.h), after the append + rotary kernel has written the new tokens (attn/append_rotary.cuh).
//
// The semantics are the shared ones: logits and visibility from common/score.h through attn/fragment_mask.cuh
// (ScoreFn, Mask), the online softmax steps of attn/softmax.cuh (SoftmaxRow), dropout words from
// common/philox.h, tile ranges from attn/tile_range.h. Only the map from registers to (query, key) differs
// from sm80's, and mma884_layout.h holds it.

#include <cuda_fp16.h>

#include <cstdint>

#include "api/problem.h"
#include "common/philox.h"
#include "common/score.h"
#include "cuda/attn/dropout_lanes.h"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/score_args.h"
#include "cuda/attn/softmax.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/ptx.h"
#include "cuda/sm70/fwd_rows.h"
#include "cuda/sm70/fwd_tile.h"
#include "cuda/sm70/mma884.cuh"
#include "cuda/sm70/mma884_layout.h"
#include "cuda/sm70/tile_load.cuh"

namespace flashattn::detail::cuda::sm70 {

using namespace attn;

// The whole CTA's work for a call of kind Args (FwdArgs or CacheArgs: fwd_rows.h); the kernels are thin
// entry points around it (fwd_kernel below, and the named entries of the sm_70 image, image_entries.cu).
template <int kHeadDim, typename Args>
__device__ __forceinline__ void fwd_cta(const Args& args) {
  using Rows = typename RowsOf<Args>::type;
  constexpr FwdTile kTile = fwd_tile(kHeadDim);
  constexpr int kThreads = FwdTile::kThreads, kBlockM = FwdTile::kBlockM;
  constexpr int kBlockN = kTile.block_n(), kPitch = kTile.row_pitch(), kPPitch = kTile.p_pitch();
  constexpr int kKeyGroups = kBlockN / 16;   // 16-key column groups of S
  constexpr int kDimGroups = kHeadDim / 16;  // 16-dim column groups of O
  constexpr int kQKSteps = kHeadDim / 4;     // k4 steps of Q K^T
  constexpr int kPVSteps = kBlockN / 4;      // k4 steps of P V

  extern __shared__ __align__(16) unsigned char smem[];
  __half* sq = reinterpret_cast<__half*>(smem);
  __half* sk = sq + kTile.q_elems();
  __half* sv = sk + kTile.kv_elems();
  __half* sp = sv + kTile.kv_elems();

  const auto& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int tile = int(blockIdx.x);
  const int m_block = args.num_m_blocks - 1 - tile % args.num_m_blocks;
  const int64_t head_seq = tile / args.num_m_blocks;
  const int64_t h = head_seq % p.heads, b = head_seq / p.heads;
  const Rows seq(args, b, h);
  const int64_t seq_q = seq.sq(), seq_k = seq.sk();
  const int64_t m0 = int64_t(m_block) * kBlockM;
  if (m0 >= seq_q) return;  // a tile past the end of a shorter (varlen) sequence
  const int valid_rows = int(seq_q - m0 < kBlockM ? seq_q - m0 : kBlockM);
  const Mask mask = make_mask(p.score, seq_q, seq_k);
  const Range keys = keys_for_rows(mask, m0, m0 + valid_rows - 1);
  const int n_begin = int(keys.begin / kBlockN);
  const int n_end = keys.end > keys.begin ? int((keys.end + kBlockN - 1) / kBlockN) : n_begin;
  const int d_chunks = int(p.head_dim / 8);

  load_tile_rows_at<kBlockM, kHeadDim, kPitch, kThreads>(
      sq, [&](int r) { return seq.q_row(m0 + r); }, valid_rows, d_chunks, tid);

  // This lane's two accumulator rows (c_row of i = 0 and i = 2), counted in the tile and in the sequence.
  const int warp_row0 = 16 * warp;
  const int tile_row[2] = {warp_row0 + c_row(lane, 0), warp_row0 + c_row(lane, 2)};
  const int64_t seq_row[2] = {m0 + tile_row[0], m0 + tile_row[1]};
  const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);
  const int64_t diag[2] = {mask.diagonal(seq_row[0]), mask.diagonal(seq_row[1])};
  __half* warp_p = sp + warp * 16 * kPPitch;
  const __half* q_lane = sq + (warp_row0 + a_row(lane)) * kPitch;
  const __half* p_lane = warp_p + a_row(lane) * kPPitch;

  float o[kDimGroups][8];
  zero_acc(o);
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.0f, 0.0f};  // row_sum: this lane's columns only

  for (int n = n_begin; n < n_end; ++n) {
    const int64_t key0 = int64_t(n) * kBlockN;
    const int rows = int(seq_k - key0 < kBlockN ? seq_k - key0 : kBlockN);
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile_rows_at<kBlockN, kHeadDim, kPitch, kThreads>(
        sk, [&](int r) { return seq.k_row(key0 + r); }, rows, d_chunks, tid);
    load_tile_rows_at<kBlockN, kHeadDim, kPitch, kThreads>(
        sv, [&](int r) { return seq.v_row(key0 + r); }, rows, d_chunks, tid);
    __syncthreads();  // Q (first tile), K and V are in shared memory

    float s[kKeyGroups][8];
    zero_acc(s);
    mma_a_bt<kKeyGroups, kQKSteps, kPitch>(s, q_lane, sk, lane);

    // Base-2 logits, then -inf where a (query, key) pair is not visible (only on tiles a mask boundary or
    // the sequence end crosses).
#pragma unroll
    for (int g = 0; g < kKeyGroups; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i)
        s[g][i] = score.logit2(s[g][i], diag[(i >> 1) & 1] - (key0 + 16 * g + c_col(lane, i)));
    if (!tile_fully_visible(mask, m0, m0 + valid_rows - 1, key0, key0 + kBlockN - 1)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const RelRange vis = visible_rel(mask, seq_row[r], key0, kBlockN);
#pragma unroll
        for (int g = 0; g < kKeyGroups; ++g)
#pragma unroll
          for (int i = 2 * r; i < 8; i += (i & 1) ? 3 : 1) {  // the accumulators of row r: i & 2 == 2 r
            const int k = 16 * g + c_col(lane, i);
            if (k < vis.begin || k >= vis.end) s[g][i] = kNegInf;
          }
      }
    }

    // Online softmax: each row's maximum over the four lanes that hold it, P = exp2(logit - max).
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = kNegInf;
#pragma unroll
      for (int g = 0; g < kKeyGroups; ++g)
#pragma unroll
        for (int i = 2 * r; i < 8; i += (i & 1) ? 3 : 1) mx = fmaxf(mx, s[g][i]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, kRowShuffle1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, kRowShuffle2));
      float offset;
      rescale[r] = SoftmaxRow::begin(row_max[r], offset, mx);
      float sum = 0.0f;
#pragma unroll
      for (int g = 0; g < kKeyGroups; ++g)
#pragma unroll
        for (int i = 2 * r; i < 8; i += (i & 1) ? 3 : 1) {
          s[g][i] = SoftmaxRow::exp(s[g][i], 1.0f, offset);
          sum += s[g][i];
        }
      row_sum[r] = row_sum[r] * rescale[r] + sum;
    }
#pragma unroll
    for (int g = 0; g < kDimGroups; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i) o[g][i] *= rescale[(i >> 1) & 1];

    // P to the warp's buffer: accumulators i and i + 1 are adjacent keys of one row.
    __syncwarp();  // every lane has read the previous tile's P
    stage_acc<kKeyGroups, kPPitch>(warp_p, s, lane);
    __syncwarp();

    // O += P V. A lane's A operand is 4 consecutive keys of one query row, exactly one Philox draw of
    // dropout (common/philox.h): the row sums above used the undropped P (the LSE is the undropped
    // softmax's), O uses the dropped one, rescaled by keep_scale in the epilogue.
    const int64_t a_seq_row = m0 + warp_row0 + a_row(lane);
    mma_a_b<kDimGroups, kPVSteps, kPitch>(o, p_lane, sv, lane, [&](int kk, Half4& a) {
      if constexpr (Rows::kDropout) {
        if (args.s.dropout) {
          const uint32_t keep =
              keep_nibble(dropout_words(p.dropout, b, h, p.heads, a_seq_row, key0 + 4 * kk), args.s.drop_threshold);
          a.lo &= ((keep & 1u) ? 0x0000ffffu : 0u) | ((keep & 2u) ? 0xffff0000u : 0u);
          a.hi &= ((keep & 4u) ? 0x0000ffffu : 0u) | ((keep & 8u) ? 0xffff0000u : 0u);
        }
      }
    });
  }

  // Epilogue: full row sums, then out = O / sum (0 for a row that saw no key) and LSE (+inf for it).
  const float keep_scale = args.s.dropout ? args.s.keep_scale : 1.0f;  // no dropout: ScoreArgs::dropout false
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, kRowShuffle1);
    l += __shfl_xor_sync(0xffffffffu, l, kRowShuffle2);
    if (tile_row[r] >= valid_rows) continue;
    const float scale = l > 0.0f ? keep_scale / l : 0.0f;
    __half* out_row = seq.out_row(seq_row[r]);
#pragma unroll
    for (int g = 0; g < kDimGroups; ++g)
#pragma unroll
      for (int i = 2 * r; i < 8; i += 4) {  // the pairs (i, i + 1) of row r: i = 2r and 2r + 4
        const int d = 16 * g + c_col(lane, i);
        if (d < p.head_dim)
          *reinterpret_cast<__half2*>(out_row + d) = __floats2half2_rn(o[g][i] * scale, o[g][i + 1] * scale);
      }
    // One of the row's four lanes writes its LSE: the one holding columns 0 and 1.
    if (float* lse = seq.lse(seq_row[r]); lse != nullptr && c_col(lane, 0) == 0)
      *lse = l > 0.0f ? row_max[r] * kLn2 + logf(l) : __builtin_huge_valf();
  }
}

template <int kHeadDim>
__global__ void __launch_bounds__(FwdTile::kThreads) fwd_kernel(const __grid_constant__ FwdArgs args) {
  fwd_cta<kHeadDim>(args);
}

template <int kHeadDim>
__global__ void __launch_bounds__(FwdTile::kThreads) cache_kernel(const __grid_constant__ CacheArgs args) {
  fwd_cta<kHeadDim>(args);
}

}  // namespace flashattn::detail::cuda::sm70
