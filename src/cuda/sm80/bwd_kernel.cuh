#pragma once

// FlashAttention-2 backward, main kernel: one CTA per (key tile of kBlockN keys, kv head, sequence),
// flattened into gridDim.x. It loops over the query heads of its GQA group and, for each, over the
// query tiles that can see its keys; per step (head h, query tile m) it recomputes
//   S^T = K Q^T,  P^T = exp2(S^T * scale * log2e - LSE * log2e)  (0 where masked),  dP^T = V dO^T,
// replays dropout (Z = keep / (1 - p)), and accumulates in registers
//   dV += (P Z)^T dO,   dS^T = P^T (dP^T Z - D) * dlogit/dqk,   dK += dS^T Q,
// so dK and dV end summed over the whole group and are written once, without atomics. Unless the call
// is deterministic, dQ += dS K is added into the fp32 workspace dq_accum with atomicAdd (a separate
// kernel, bwd_dq_kernel.cuh, does dQ without atomics otherwise).
//
// Pipeline: K and V are loaded once; Q, dO, LSE and D are double-buffered: step i + 1's cp.async are
// issued right after the barrier that starts step i, which also certifies that every warp finished
// step i - 1 (the buffer being refilled, and the dS^T tile).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/score.h"
#include "cuda/attn/dropout.cuh"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/bwd_mainloop.cuh"
#include "cuda/sm80/bwd_tiled_kernel.cuh"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

// kGeneral = false: no dropout, softcap or ALiBi in the call (as in bwd_tiled_kernel.cuh).
template <typename T, int kHeadDim, BwdPass kPass, bool kGeneral>
__global__ void __launch_bounds__(BwdMainloop<T, kHeadDim, kPass>::kThreads, 1)
    bwd_kernel(const __grid_constant__ BwdArgs args) {
  using Main = BwdMainloop<T, kHeadDim, kPass>;
  using QTile = typename Main::QTile;
  using KVTile = typename Main::KVTile;
  using DSTile = typename Main::DSTile;
  constexpr int kBlockN = Main::kBlockN, kBlockM = Main::kBlockM, kThreads = Main::kThreads;
  constexpr int kQFrags = Main::kQFrags, kDFrags = Main::kDFrags;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + Main::kOffV;
  T* sq = sk + Main::kOffQ;    // [2][QTile::kElems]
  T* sdo = sk + Main::kOffDO;  // [2][QTile::kElems]
  T* sds = sk + Main::kOffDS;
  float* slse = reinterpret_cast<float*>(sk + Main::kElemsT);  // [2][kBlockM]
  float* sdsum = slse + 2 * kBlockM;                           // [2][kBlockM]
  const uint32_t sk_addr = ptx::smem_addr(sk), sv_addr = ptx::smem_addr(sv), sds_addr = ptx::smem_addr(sds);

  const BwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  int64_t block = blockIdx.x;
  const int n_block = int(block % args.num_n_blocks);
  block /= args.num_n_blocks;
  const int64_t hk = block % p.heads_k;
  const int64_t b = block / p.heads_k;
  const SeqRange seq = seq_range(p, b);
  const int64_t n0 = int64_t(n_block) * kBlockN;
  // A varlen sequence shorter than max_seqlen_k: the rows past its end belong to the next sequence.
  if (n0 >= seq.sk) return;
  const int valid_keys = int(seq.sk - n0 < kBlockN ? seq.sk - n0 : kBlockN);
  const int d_chunks = int(p.head_dim / 8);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);
  const int group = args.s.group;

  const Range rows = rows_for_keys(mask, n0, n0 + valid_keys - 1);
  const int m_begin = int(rows.begin / kBlockM);
  const int m_count = rows.end > rows.begin ? int((rows.end + kBlockM - 1) / kBlockM) - m_begin : 0;
  const int steps = group * m_count;

  const int64_t k_row0 = seq.k_start + n0;
  load_rows_async<KVTile, kBlockN, kThreads>(sk, static_cast<const T*>(p.k.ptr) + p.k.offset(b, k_row0, hk),
                                             p.k.row_stride, valid_keys, d_chunks, tid);
  if constexpr (Main::kDoDK)
    load_rows_async<KVTile, kBlockN, kThreads>(sv, static_cast<const T*>(p.v.ptr) + p.v.offset(b, k_row0, hk),
                                               p.v.row_stride, valid_keys, d_chunks, tid);

  // Head and first query row of step i.
  const auto step_head = [&](int i) { return hk * group + i / m_count; };
  const auto step_m0 = [&](int i) { return int64_t(m_begin + i % m_count) * kBlockM; };
  const auto issue_step = [&](int i, int buf) {
    const int64_t h = step_head(i), m0 = step_m0(i);
    const int valid_q = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
    const int64_t q_row = seq.q_start + m0;
    load_rows_async<QTile, kBlockM, kThreads>(sq + buf * QTile::kElems,
                                              static_cast<const T*>(p.q.ptr) + p.q.offset(b, q_row, h), p.q.row_stride,
                                              valid_q, d_chunks, tid);
    load_rows_async<QTile, kBlockM, kThreads>(sdo + buf * QTile::kElems,
                                              static_cast<const T*>(p.dout.ptr) + p.dout.offset(b, q_row, h),
                                              p.dout.row_stride, valid_q, d_chunks, tid);
    load_floats_async<kBlockM>(slse + buf * kBlockM, p.lse.ptr + p.lse.offset(b, q_row, h), valid_q, tid);
    if constexpr (Main::kDoDK)
      load_floats_async<kBlockM>(sdsum + buf * kBlockM, args.dsum + h * p.total_q + global_q_row(p, b, seq, m0),
                                 valid_q, tid - kBlockM);
  };
  if (steps > 0) issue_step(0, 0);
  ptx::cp_async_commit();

  float dv[Main::kDoDV ? kDFrags : 1][4], dk[Main::kDoDK ? kDFrags : 1][4];
#pragma unroll
  for (int f = 0; f < (Main::kDoDV ? kDFrags : 1); ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[f][e] = 0.0f;
#pragma unroll
  for (int f = 0; f < (Main::kDoDK ? kDFrags : 1); ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[f][e] = 0.0f;
  const int64_t warp_key0 = n0 + 16 * warp;  // first key (in the sequence) of this warp's fragment
  const typename Main::Lanes lanes(lane);

  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (step + 1 < steps) {
      issue_step(step + 1, buf ^ 1);
      ptx::cp_async_commit();
    }
    const int64_t h = step_head(step), m0 = step_m0(step);
    const int valid_q = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
    const uint32_t sq_addr = ptx::smem_addr(sq + buf * QTile::kElems);
    const uint32_t sdo_addr = ptx::smem_addr(sdo + buf * QTile::kElems);
    const float* lse = slse + buf * kBlockM;
    const float* dsum = sdsum + buf * kBlockM;
    const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);

    float s[kQFrags][4], dp[Main::kDoDK ? kQFrags : 1][4];
#pragma unroll
    for (int f = 0; f < kQFrags; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[f][e] = 0.0f;
    Main::keys_by_queries(s, sk_addr, sq_addr, lanes, warp);
    if constexpr (Main::kDoDK) {
#pragma unroll
      for (int f = 0; f < kQFrags; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[f][e] = 0.0f;
      Main::keys_by_queries(dp, sv_addr, sdo_addr, lanes, warp);
    }

    // Element (f, e): key warp_key0 + g + 8 (e / 2), query m0 + 8 f + 2 t + e % 2 (attn/fragment_mask.cuh). Padding
    // query rows (>= sq) are masked too: their LSE was zero-filled, so P must not be trusted there.
    const bool needs_mask = valid_q < kBlockM || !tile_fully_visible(mask, m0, m0 + kBlockM - 1, n0, n0 + kBlockN - 1);
    if constexpr (!kGeneral) {
      const float scale_log2 = args.s.scale_log2, scale = p.score.softmax_scale;
#pragma unroll
      for (int f = 0; f < kQFrags; ++f)
#pragma unroll
        for (int qb = 0; qb < 2; ++qb) {
          const int q_local = 8 * f + 2 * t + qb;
          const float lse2 = lse[q_local] * kLog2e;
          const float d_row = Main::kDoDK ? dsum[q_local] : 0.0f;
          const RelRange vis = needs_mask ? visible_rel(mask, m0 + q_local, warp_key0, 16) : RelRange{0, 16};
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            const int e = 2 * kh + qb;
            const int key_local = g + 8 * kh;
            float prob = ptx::exp2_approx(s[f][e] * scale_log2 - lse2);
            if (key_local < vis.begin || key_local >= vis.end) prob = 0.0f;
            s[f][e] = prob;
            if constexpr (Main::kDoDK) dp[f][e] = prob * (dp[f][e] - d_row) * scale;
          }
        }
    } else {
#pragma unroll
      for (int f = 0; f < kQFrags; ++f) {
        const uint32_t keep = args.s.dropout ? keep_bits_transposed(p.dropout, args.s.drop_threshold, b, h, p.heads,
                                                                    warp_key0, m0 + 8 * f, lane)
                                             : 0u;
#pragma unroll
        for (int qb = 0; qb < 2; ++qb) {
          const int q_local = 8 * f + 2 * t + qb;
          const int64_t query = m0 + q_local;
          const float lse2 = lse[q_local] * kLog2e;
          const float d_row = Main::kDoDK ? dsum[q_local] : 0.0f;
          const RelRange vis = needs_mask ? visible_rel(mask, query, warp_key0, 16) : RelRange{0, 16};
          const int64_t diag = mask.diagonal(query);
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            const int e = 2 * kh + qb;
            const int key_local = g + 8 * kh;
            const float qk = s[f][e];
            float prob = ptx::exp2_approx(score.logit2(qk, diag - (warp_key0 + key_local)) - lse2);
            if (key_local < vis.begin || key_local >= vis.end) prob = 0.0f;
            const float z = args.s.dropout ? (kept_transposed(keep, e, lane) ? args.s.keep_scale : 0.0f) : 1.0f;
            s[f][e] = prob * z;
            if constexpr (Main::kDoDK) dp[f][e] = prob * (dp[f][e] * z - d_row) * score.dlogit(qk);
          }
        }
      }
    }

    if constexpr (Main::kDoDV) Main::keys_by_dims(dv, s, sdo_addr, lanes);
    if constexpr (Main::kDoDK) {
      Main::keys_by_dims(dk, dp, sq_addr, lanes);
      if (args.dq_accum != nullptr) {
        const float one[2] = {1.0f, 1.0f};
        store_acc<T, DSTile>(sds, dp, 16 * warp, 0, one, lane);
        __syncthreads();  // dS^T of every warp is in shared memory
        const int row0 = 16 * (warp % Main::kDqRowGroups);
        const int col0 = Main::kDqCols * (warp / Main::kDqRowGroups);
        const int64_t q_row0 = global_q_row(p, b, seq, m0);
#pragma unroll
        for (int sub = 0; sub < Main::kDqCols / Main::kDqSub; ++sub) {
          float acc[Main::kDqSub / 8][4];
#pragma unroll
          for (int f = 0; f < Main::kDqSub / 8; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[f][e] = 0.0f;
          const int cols = col0 + sub * Main::kDqSub;
          Main::dq_slice(acc, sds_addr, sk_addr, lanes, row0, cols);
#pragma unroll
          for (int f = 0; f < Main::kDqSub / 8; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = row0 + g + 8 * (e >> 1), col = cols + 8 * f + 2 * t + (e & 1);
              if (row < valid_q && col < p.head_dim)
                atomicAdd(args.dq_accum + dq_accum_offset(q_row0 + row, h, col, p.heads, p.head_dim), acc[f][e]);
            }
        }
      }
    }
  }

  // dK, dV: staged through the K and V tiles (every warp is done with them after this barrier) and
  // stored as whole 16-byte chunks of rows.
  ptx::cp_async_wait<0>();
  __syncthreads();
  const float one[2] = {1.0f, 1.0f};
  if constexpr (Main::kDoDV) store_acc<T, KVTile>(sv, dv, 16 * warp, 0, one, lane);
  if constexpr (Main::kDoDK) store_acc<T, KVTile>(sk, dk, 16 * warp, 0, one, lane);
  __syncthreads();
  if constexpr (Main::kDoDV)
    store_rows<KVTile, kBlockN, kThreads>(static_cast<T*>(p.dv.ptr) + p.dv.offset(b, k_row0, hk), p.dv.row_stride, sv,
                                          0, valid_keys, d_chunks, tid);
  if constexpr (Main::kDoDK)
    store_rows<KVTile, kBlockN, kThreads>(static_cast<T*>(p.dk.ptr) + p.dk.offset(b, k_row0, hk), p.dk.row_stride, sk,
                                          0, valid_keys, d_chunks, tid);
}

template <typename T, int kHeadDim, BwdPass kPass>
void launch_bwd_pass(const BwdArgs& args, cudaStream_t stream) {
  using Main = BwdMainloop<T, kHeadDim, kPass>;
  const int64_t blocks = int64_t(args.num_n_blocks) * args.p.heads_k * args.p.batch;
  if (blocks == 0) return;
  auto kernel =
      needs_general_kernel(args.p) ? bwd_kernel<T, kHeadDim, kPass, true> : bwd_kernel<T, kHeadDim, kPass, false>;
  allow_dynamic_smem(kernel, Main::kSmemBytes, args.p.device.index, "sm80 backward");
  kernel<<<grid_1d(blocks, "sm80 backward"), Main::kThreads, Main::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 backward kernel");
}

// dK and dV (and dQ into dq_accum unless deterministic) for one (dtype, head-dim bucket), in the
// partition bwd_tile_for picks for a device whose CTAs may opt into `smem_optin` bytes of shared memory
// (kernel_traits.h; launch_bwd set args.num_n_blocks from the same partition); instantiated in
// bwd_hdim<D>.cu.
template <typename T, int kHeadDim>
void run_bwd(BwdArgs args, int64_t smem_optin, cudaStream_t stream) {
  const BwdTile tile = bwd_tile_for(kHeadDim, smem_optin);
  if constexpr (has_rows_fallback(kHeadDim)) {
    if (!tile.tiled) {
      launch_bwd_pass<T, kHeadDim, BwdPass::dv_only>(args, stream);
      launch_bwd_pass<T, kHeadDim, BwdPass::dk_only>(args, stream);
      return;
    }
  }
  launch_bwd_tiled<T, kHeadDim>(args, stream);
}

}  // namespace flashattn::detail::cuda::sm80
