#pragma once

// FlashAttention-2 backward on Volta's tensor cores (mma.sync.m8n8k4), as two kernels that each recompute
// the scores they need, so that no gradient is added by two CTAs (no atomics: the results are the same
// bits run to run, and the deterministic mode costs nothing extra):
//  * bwd_kv_cta: a CTA owns 64 keys of one kv head and sequence (4 warps x 16 keys) and walks every query
//    row of the group's heads that sees them (attn::rows_for_keys), q_rows at a time:
//      S^T = K Q^T, P^T = exp(logits - LSE)              (keys x queries: the warp's A operand is K)
//      dV += (P^T * Z / (1 - p)) dO                      (P^T staged in f16 through the warp's buffer)
//      dP^T = V dO^T, dS^T = P^T * (dP^T * Z / (1 - p) - D) * dlogit/dqk
//      dK += dS^T Q                                      (dS^T staged the same way)
//    Above head dim 128 it runs twice (dV, then dK: kDV / kDK) so that a lane holds one D-wide accumulator.
//  * bwd_dq_cta: a CTA owns 64 query rows of one head (4 warps x 16) and walks the key tiles they see:
//      S = Q K^T, P, dP = dO V^T, dS as above, dQ += dS K (dS staged), stored once at the end.
// D = rowsum(dO * O) comes from attn::bwd_dsum (bwd_prepost.cuh), run first. Z is the dropout keep mask
// (common/philox.h, dropout_keep per element). Logits, masks, scores and their derivative are the shared
// ones (attn::ScoreFn, attn::Mask); mma884_layout.h maps registers to (key, query) or (query, key).

#include <cuda_fp16.h>

#include <cstdint>

#include "api/problem.h"
#include "common/philox.h"
#include "common/score.h"
#include "cuda/attn/bwd_args.h"
#include "cuda/attn/dq_accum.h"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/score_args.h"
#include "cuda/attn/softmax.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/ptx.h"
#include "cuda/sm70/bwd_tile.h"
#include "cuda/sm70/mma884.cuh"
#include "cuda/sm70/mma884_layout.h"
#include "cuda/sm70/tile_load.cuh"

namespace flashattn::detail::cuda::sm70 {

using namespace attn;

// The dropout factor of element (query i, key j): 1 / (1 - p) when kept, 0 when dropped, 1 without dropout.
__device__ __forceinline__ float dropout_factor(const BwdArgs& args, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!args.s.dropout) return 1.0f;
  return dropout_keep(args.p.dropout, b, h, args.p.heads, i, j) ? args.s.keep_scale : 0.0f;
}

// Writes a warp's 16 x (16 kDimGroups) f32 accumulator rows [row0 + c_row] of a gradient as T, skipping
// rows at or past `rows` and dims at or past head_dim.
template <int kDimGroups>
__device__ __forceinline__ void store_rows(__half* base, int64_t row_stride, const float (&acc)[kDimGroups][8],
                                           int row0, int rows, int head_dim, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + c_row(lane, 2 * r);
    if (row >= rows) continue;
    __half* dst = base + int64_t(row) * row_stride;
#pragma unroll
    for (int g = 0; g < kDimGroups; ++g)
#pragma unroll
      for (int i = 2 * r; i < 8; i += 4) {  // the column pairs (i, i + 1) of row r
        const int d = 16 * g + c_col(lane, i);
        if (d < head_dim) *reinterpret_cast<__half2*>(dst + d) = __floats2half2_rn(acc[g][i], acc[g][i + 1]);
      }
  }
}

template <int kHeadDim, bool kDV, bool kDK>
__device__ __forceinline__ void bwd_kv_cta(const BwdArgs& args) {
  constexpr BwdTile kTile = bwd_tile(kHeadDim);
  constexpr int kThreads = BwdTile::kThreads, kKeys = BwdTile::kRows;
  constexpr int kQRows = kTile.q_rows(), kPitch = kTile.pitch(), kSPitch = kTile.kv_stage_pitch();
  constexpr int kQGroups = kQRows / 16;      // 16-query column groups of S^T
  constexpr int kDimGroups = kHeadDim / 16;  // 16-dim column groups of dK, dV
  constexpr int kDSteps = kHeadDim / 4;      // k4 steps over the head dim (S^T, dP^T)
  constexpr int kQSteps = kQRows / 4;        // k4 steps over the queries (dV, dK)

  extern __shared__ __align__(16) unsigned char smem[];
  __half* sk = reinterpret_cast<__half*>(smem);
  __half* sv = sk + kKeys * kPitch;
  __half* sq = sv + kKeys * kPitch;
  __half* sdo = sq + kQRows * kPitch;
  __half* stage = sdo + kQRows * kPitch;
  float* s_lse = reinterpret_cast<float*>(stage + BwdTile::kWarps * 16 * kSPitch);  // LSE * log2(e)
  float* s_dsum = s_lse + kQRows;

  const BwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int n_block = int(blockIdx.x) % args.num_n_blocks;
  const int64_t head_seq = int64_t(blockIdx.x) / args.num_n_blocks;
  const int64_t hk = head_seq % p.heads_k, b = head_seq / p.heads_k;
  const SeqRange seq = seq_range(p, b);
  const int64_t key0 = int64_t(n_block) * kKeys;
  if (key0 >= seq.sk) return;  // a key tile past the end of a shorter (varlen) sequence
  const int valid_keys = int(seq.sk - key0 < kKeys ? seq.sk - key0 : kKeys);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);
  const Range rows = rows_for_keys(mask, key0, key0 + valid_keys - 1);
  const int d_chunks = int(p.head_dim / 8);

  load_tile_rows<kKeys, kHeadDim, kPitch, kThreads>(
      sk, static_cast<const __half*>(p.k.ptr) + p.k.offset(b, seq.k_start + key0, hk), p.k.row_stride, valid_keys,
      d_chunks, tid);
  load_tile_rows<kKeys, kHeadDim, kPitch, kThreads>(
      sv, static_cast<const __half*>(p.v.ptr) + p.v.offset(b, seq.k_start + key0, hk), p.v.row_stride, valid_keys,
      d_chunks, tid);

  const int warp_key0 = 16 * warp;
  __half* warp_stage = stage + warp * 16 * kSPitch;
  const __half* k_lane = sk + (warp_key0 + a_row(lane)) * kPitch;
  const __half* v_lane = sv + (warp_key0 + a_row(lane)) * kPitch;
  const __half* stage_lane = warp_stage + a_row(lane) * kSPitch;
  // This lane's two accumulator rows are keys (c_row of i = 0 and 2).
  const int64_t lane_key[2] = {key0 + warp_key0 + c_row(lane, 0), key0 + warp_key0 + c_row(lane, 2)};

  float dv[kDV ? kDimGroups : 1][8], dk[kDK ? kDimGroups : 1][8];
  zero_acc(dv);
  zero_acc(dk);

  const int m_begin = int(rows.begin / kQRows);
  const int m_end = rows.end > rows.begin ? int((rows.end + kQRows - 1) / kQRows) : m_begin;
  for (int64_t h = hk * args.s.group; h < (hk + 1) * args.s.group; ++h) {
    const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);
    for (int m = m_begin; m < m_end; ++m) {
      const int64_t q0 = int64_t(m) * kQRows;
      const int nq = int(seq.sq - q0 < kQRows ? seq.sq - q0 : kQRows);
      __syncthreads();  // every warp is done with the previous step's Q, dO, LSE and D
      load_tile_rows<kQRows, kHeadDim, kPitch, kThreads>(
          sq, static_cast<const __half*>(p.q.ptr) + p.q.offset(b, seq.q_start + q0, h), p.q.row_stride, nq, d_chunks,
          tid);
      load_tile_rows<kQRows, kHeadDim, kPitch, kThreads>(
          sdo, static_cast<const __half*>(p.dout.ptr) + p.dout.offset(b, seq.q_start + q0, h), p.dout.row_stride, nq,
          d_chunks, tid);
      if (tid < kQRows) {
        // Rows past the sequence: LSE +inf makes their P 0.
        s_lse[tid] = tid < nq ? p.lse.ptr[p.lse.offset(b, seq.q_start + q0 + tid, h)] * kLog2e : __builtin_huge_valf();
        s_dsum[tid] = tid < nq ? args.dsum[h * p.total_q + global_q_row(p, b, seq, q0 + tid)] : 0.0f;
      }
      __syncthreads();

      // S^T = K Q^T: rows are the warp's keys, columns the step's queries.
      float st[kQGroups][8];
      zero_acc(st);
      mma_a_bt<kQGroups, kDSteps, kPitch>(st, k_lane, sq, lane);
      const bool full = tile_fully_visible(mask, q0, q0 + nq - 1, key0, key0 + kKeys - 1);
      // P^T (into pt), keeping the raw dot products for the score's derivative.
      float pt[kQGroups][8];
#pragma unroll
      for (int g = 0; g < kQGroups; ++g)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int ql = 16 * g + c_col(lane, i);
          const int64_t qi = q0 + ql, kj = lane_key[(i >> 1) & 1];
          float x = score.logit2(st[g][i], mask.diagonal(qi) - kj);
          if (!full && !(qi < seq.sq && mask.visible(qi, kj))) x = kNegInf;
          pt[g][i] = ptx::exp2_approx(x - s_lse[ql]);
        }

      if constexpr (kDV) {
        float pz[kQGroups][8];
#pragma unroll
        for (int g = 0; g < kQGroups; ++g)
#pragma unroll
          for (int i = 0; i < 8; ++i)
            pz[g][i] = pt[g][i] * dropout_factor(args, b, h, q0 + 16 * g + c_col(lane, i), lane_key[(i >> 1) & 1]);
        __syncwarp();  // every lane has read the buffer's previous contents
        stage_acc<kQGroups, kSPitch>(warp_stage, pz, lane);
        __syncwarp();
        mma_a_b<kDimGroups, kQSteps, kPitch>(dv, stage_lane, sdo, lane);
      }

      if constexpr (kDK) {
        // dP^T = V dO^T, then dS^T in place.
        float dpt[kQGroups][8];
        zero_acc(dpt);
        mma_a_bt<kQGroups, kDSteps, kPitch>(dpt, v_lane, sdo, lane);
#pragma unroll
        for (int g = 0; g < kQGroups; ++g)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int ql = 16 * g + c_col(lane, i);
            const float z = dropout_factor(args, b, h, q0 + ql, lane_key[(i >> 1) & 1]);
            dpt[g][i] = pt[g][i] * (dpt[g][i] * z - s_dsum[ql]) * score.dlogit(st[g][i]);
          }
        __syncwarp();  // every lane has read P^T (dV's A operands)
        stage_acc<kQGroups, kSPitch>(warp_stage, dpt, lane);
        __syncwarp();
        mma_a_b<kDimGroups, kQSteps, kPitch>(dk, stage_lane, sq, lane);
      }
    }
  }

  if constexpr (kDV)
    store_rows<kDimGroups>(static_cast<__half*>(p.dv.ptr) + p.dv.offset(b, seq.k_start + key0, hk), p.dv.row_stride, dv,
                           warp_key0, valid_keys, int(p.head_dim), lane);
  if constexpr (kDK)
    store_rows<kDimGroups>(static_cast<__half*>(p.dk.ptr) + p.dk.offset(b, seq.k_start + key0, hk), p.dk.row_stride, dk,
                           warp_key0, valid_keys, int(p.head_dim), lane);
}

template <int kHeadDim>
__device__ __forceinline__ void bwd_dq_cta(const BwdArgs& args) {
  constexpr BwdTile kTile = bwd_tile(kHeadDim);
  constexpr int kThreads = BwdTile::kThreads, kBlockM = BwdTile::kRows;
  constexpr int kBlockN = kTile.block_n(), kPitch = kTile.pitch(), kSPitch = kTile.dq_stage_pitch();
  constexpr int kKeyGroups = kBlockN / 16;
  constexpr int kDimGroups = kHeadDim / 16;
  constexpr int kDSteps = kHeadDim / 4;
  constexpr int kKSteps = kBlockN / 4;

  extern __shared__ __align__(16) unsigned char smem[];
  __half* sq = reinterpret_cast<__half*>(smem);
  __half* sdo = sq + kBlockM * kPitch;
  __half* sk = sdo + kBlockM * kPitch;
  __half* sv = sk + kBlockN * kPitch;
  __half* stage = sv + kBlockN * kPitch;

  const BwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int m_block = args.num_m_blocks - 1 - int(blockIdx.x) % args.num_m_blocks;
  const int64_t head_seq = int64_t(blockIdx.x) / args.num_m_blocks;
  const int64_t h = head_seq % p.heads, b = head_seq / p.heads;
  const SeqRange seq = seq_range(p, b);
  const int64_t m0 = int64_t(m_block) * kBlockM;
  if (m0 >= seq.sq) return;
  const int valid_rows = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);
  const Range keys = keys_for_rows(mask, m0, m0 + valid_rows - 1);
  const int n_begin = int(keys.begin / kBlockN);
  const int n_end = keys.end > keys.begin ? int((keys.end + kBlockN - 1) / kBlockN) : n_begin;
  const int64_t hk = h / args.s.group;
  const int d_chunks = int(p.head_dim / 8);

  load_tile_rows<kBlockM, kHeadDim, kPitch, kThreads>(
      sq, static_cast<const __half*>(p.q.ptr) + p.q.offset(b, seq.q_start + m0, h), p.q.row_stride, valid_rows,
      d_chunks, tid);
  load_tile_rows<kBlockM, kHeadDim, kPitch, kThreads>(
      sdo, static_cast<const __half*>(p.dout.ptr) + p.dout.offset(b, seq.q_start + m0, h), p.dout.row_stride,
      valid_rows, d_chunks, tid);

  const int warp_row0 = 16 * warp;
  __half* warp_stage = stage + warp * 16 * kSPitch;
  const __half* q_lane = sq + (warp_row0 + a_row(lane)) * kPitch;
  const __half* do_lane = sdo + (warp_row0 + a_row(lane)) * kPitch;
  const __half* stage_lane = warp_stage + a_row(lane) * kSPitch;
  const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);
  int64_t seq_row[2];
  float lse2[2], dsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    seq_row[r] = m0 + warp_row0 + c_row(lane, 2 * r);
    const bool in = seq_row[r] < seq.sq;
    lse2[r] = in ? p.lse.ptr[p.lse.offset(b, seq.q_start + seq_row[r], h)] * kLog2e : __builtin_huge_valf();
    dsum[r] = in ? args.dsum[h * p.total_q + global_q_row(p, b, seq, seq_row[r])] : 0.0f;
  }

  float dq[kDimGroups][8];
  zero_acc(dq);

  for (int n = n_begin; n < n_end; ++n) {
    const int64_t key0 = int64_t(n) * kBlockN;
    const int nk = int(seq.sk - key0 < kBlockN ? seq.sk - key0 : kBlockN);
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile_rows<kBlockN, kHeadDim, kPitch, kThreads>(
        sk, static_cast<const __half*>(p.k.ptr) + p.k.offset(b, seq.k_start + key0, hk), p.k.row_stride, nk, d_chunks,
        tid);
    load_tile_rows<kBlockN, kHeadDim, kPitch, kThreads>(
        sv, static_cast<const __half*>(p.v.ptr) + p.v.offset(b, seq.k_start + key0, hk), p.v.row_stride, nk, d_chunks,
        tid);
    __syncthreads();

    // S = Q K^T and dP = dO V^T: rows are the warp's queries, columns the tile's keys.
    float s[kKeyGroups][8], dp[kKeyGroups][8];
    zero_acc(s);
    zero_acc(dp);
    mma_a_bt<kKeyGroups, kDSteps, kPitch>(s, q_lane, sk, lane);
    mma_a_bt<kKeyGroups, kDSteps, kPitch>(dp, do_lane, sv, lane);
    const bool full = tile_fully_visible(mask, m0, m0 + valid_rows - 1, key0, key0 + kBlockN - 1);
#pragma unroll
    for (int g = 0; g < kKeyGroups; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int r = (i >> 1) & 1;
        const int64_t kj = key0 + 16 * g + c_col(lane, i);
        float x = score.logit2(s[g][i], mask.diagonal(seq_row[r]) - kj);
        if (!full && !(seq_row[r] < seq.sq && mask.visible(seq_row[r], kj))) x = kNegInf;
        const float pv = ptx::exp2_approx(x - lse2[r]);
        const float z = dropout_factor(args, b, h, seq_row[r], kj);
        dp[g][i] = pv * (dp[g][i] * z - dsum[r]) * score.dlogit(s[g][i]);  // dS
      }
    __syncwarp();  // every lane has read the previous tile's dS
    stage_acc<kKeyGroups, kSPitch>(warp_stage, dp, lane);
    __syncwarp();
    mma_a_b<kDimGroups, kKSteps, kPitch>(dq, stage_lane, sk, lane);
  }

  store_rows<kDimGroups>(static_cast<__half*>(p.dq.ptr) + p.dq.offset(b, seq.q_start + m0, h), p.dq.row_stride, dq,
                         warp_row0, valid_rows, int(p.head_dim), lane);
}

template <int kHeadDim, bool kDV, bool kDK>
__global__ void __launch_bounds__(BwdTile::kThreads) bwd_kv_kernel(const __grid_constant__ BwdArgs args) {
  bwd_kv_cta<kHeadDim, kDV, kDK>(args);
}

template <int kHeadDim>
__global__ void __launch_bounds__(BwdTile::kThreads) bwd_dq_kernel(const __grid_constant__ BwdArgs args) {
  bwd_dq_cta<kHeadDim>(args);
}

}  // namespace flashattn::detail::cuda::sm70
