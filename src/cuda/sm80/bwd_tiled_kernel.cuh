#pragma once

// FlashAttention-2 backward, main kernel in the tiled partition (every head dim; kernel_traits.h and
// bwd_tiled_mainloop.cuh): one CTA per (key tile of kBlockN keys, kv head, sequence), flattened into
// gridDim.x. It loops over the query heads of its GQA group and, for each, over the query tiles that can
// see its keys; per step (head h, query tile m):
//   phase 1: S = Q K^T, dP = dO V^T; P = exp2(S * scale * log2e - LSE * log2e) (0 where masked),
//            Z = keep / (1 - p) replayed from Philox, dS = P (dP Z - D) dlogit/dqk; P Z and dS -> smem
//   barrier
//   phase 2: dV += (P Z)^T dO, dK += dS^T Q (registers, summed over the whole group: no atomics)
//   phase 3: dQ += dS K into the fp32 workspace dq_accum with atomics (skipped when deterministic:
//            bwd_dq_kernel.cuh computes dQ then)
//
// Pipeline: K and V are loaded once; Q, dO, LSE and D are double-buffered: step i + 1's cp.async are
// issued right after the barrier that starts step i. That barrier also certifies that every warp
// finished step i - 1 (its phase 2 and 3 reads of P, dS and of the buffer being refilled), so two
// barriers per step suffice.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "common/score.h"
#include "cuda/attn/dropout.cuh"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/bwd_tiled_mainloop.cuh"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

// dst[0] += a, dst[1] += b (dst 8-byte aligned): one 8-byte vector reduction on sm_90 (atomicAdd on
// float2 exists from compute capability 9.0 on), two scalar ones before. The return value is unused,
// so both compile to fire-and-forget RED instructions.
__device__ __forceinline__ void atomic_add2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// kGeneral = false: the call has no dropout, no softcap and no ALiBi (the host checks), so phase 1's
// element-wise step is P = exp2(qk scale log2e - LSE log2e), dS = P (dP - D) scale, without the per-element
// feature selects and Philox replay. Profiling (bench/results/2026-12-02-h200-ncu/) showed the backward
// issuing twice FA2's instructions, most of them in this element-wise code.
template <typename T, int kHeadDim, bool kGeneral>
__global__ void __launch_bounds__(BwdTiled<T, kHeadDim, kGeneral>::kThreads, 1)
    bwd_tiled_kernel(const __grid_constant__ BwdArgs args) {
  using Main = BwdTiled<T, kHeadDim, kGeneral>;
  using QTile = typename Main::QTile;
  using KVTile = typename Main::KVTile;
  using STile = typename Main::STile;
  constexpr int kBlockN = Main::kBlockN, kBlockM = Main::kBlockM, kThreads = Main::kThreads;
  // Fragments per warp tile: 16-row (MMA m) x 8-column (MMA n) blocks of each phase.
  constexpr int kSdpMF = Main::kSdpM / 16, kSdpNF = Main::kSdpN / 8, kChunkMF = Main::kSdpChunkMF;
  constexpr int kDkvMF = Main::kDkvN / 16, kDkvNF = Main::kDkvD / 8;
  constexpr int kDqMF = Main::kDqM / 16, kDqNF = Main::kDqD / 8, kDqChunkMF = Main::kDqChunkMF;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + Main::kOffV;
  T* sq = sk + Main::kOffQ;    // [2][QTile::kElems]
  T* sdo = sk + Main::kOffDO;  // [2][QTile::kElems]
  T* sp = sk + Main::kOffP;
  T* sds = sk + Main::kOffDS;
  float* slse = reinterpret_cast<float*>(sk + Main::kElemsT);  // [2][kBlockM]
  float* sdsum = slse + 2 * kBlockM;                           // [2][kBlockM]
  const uint32_t sk_addr = ptx::smem_addr(sk), sv_addr = ptx::smem_addr(sv);
  const uint32_t sp_addr = ptx::smem_addr(sp), sds_addr = ptx::smem_addr(sds);

  const BwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Warp tile origins (inside the step's tiles) of the three phases.
  constexpr BwdTile kTile = Main::kTile;
  const int sdp_m0 = kTile.sdp_origin(warp).row, sdp_n0 = kTile.sdp_origin(warp).col;
  const int dkv_n0 = kTile.dkv_origin(warp).row, dkv_d0 = kTile.dkv_origin(warp).col;
  const int dq_m0 = kTile.dq_origin(warp).row, dq_d0 = kTile.dq_origin(warp).col;

  // Sequence positions, heads and batch indices fit an int (supports_bwd bounds the sequence lengths
  // and the grid); int rather than int64_t saves registers the mainloop needs.
  int64_t block = blockIdx.x;
  int n_block;
  if (args.order.per_head()) {
    n_block = int(block % args.num_n_blocks);
    block /= args.num_n_blocks;
  } else {  // launch_bwd.cu: heaviest (lowest) key tiles first
    const TileCoord c = tile_coord(int(block), args.order);
    n_block = args.num_n_blocks - 1 - c.m_block;
    block = c.head_seq;
  }
  const int hk = int(block % p.heads_k);
  const int b = int(block / p.heads_k);
  const SeqRange seq64 = seq_range(p, b);
  const int q_start = int(seq64.q_start), sq_len = int(seq64.sq), k_start = int(seq64.k_start), sk_len = int(seq64.sk);
  // Rebuilt where used (the int fields widen for free; the window bounds are kernel parameters).
  const auto seq = [&] { return SeqRange{q_start, sq_len, k_start, sk_len}; };
  const auto mask = [&] { return make_mask(p.score, sq_len, sk_len); };
  const int n0 = n_block * kBlockN;
  // A varlen sequence shorter than max_seqlen_k: the rows past its end belong to the next sequence.
  if (n0 >= sk_len) return;
  const int valid_keys = sk_len - n0 < kBlockN ? sk_len - n0 : kBlockN;
  const int head_dim = int(p.head_dim), d_chunks = head_dim / 8;
  const int group = args.s.group;

  const Range rows = rows_for_keys(mask(), n0, n0 + valid_keys - 1);
  const int m_begin = int(rows.begin / kBlockM);
  const int m_count = rows.end > rows.begin ? int((rows.end + kBlockM - 1) / kBlockM) - m_begin : 0;
  const int steps = group * m_count;

  const int k_row0 = k_start + n0;
  load_rows_async<KVTile, kBlockN, kThreads>(sk, static_cast<const T*>(p.k.ptr) + p.k.offset(b, k_row0, hk),
                                             p.k.row_stride, valid_keys, d_chunks, tid);
  load_rows_async<KVTile, kBlockN, kThreads>(sv, static_cast<const T*>(p.v.ptr) + p.v.offset(b, k_row0, hk),
                                             p.v.row_stride, valid_keys, d_chunks, tid);

  // Steps run head-major: step i is (head hk * group + i / m_count, query tile m_begin + i % m_count). The
  // pair is advanced by counters (next_step) rather than divided out per step: the two integer divisions
  // were ~55 of the 1689 instructions a warp issued per step (the SASS table of
  // bench/results/2026-12-03-h200-ncu-v5/).
  struct Step {
    int h, m;  // query head, query tile index relative to m_begin
  };
  const auto next_step = [&](Step s) { return s.m + 1 < m_count ? Step{s.h, s.m + 1} : Step{s.h + 1, 0}; };
  const auto issue_step = [&](Step s, int buf) {
    const int m0 = (m_begin + s.m) * kBlockM;
    const int valid_q = sq_len - m0 < kBlockM ? sq_len - m0 : kBlockM;
    const int q_row = q_start + m0;
    load_rows_async<QTile, kBlockM, kThreads>(sq + buf * QTile::kElems,
                                              static_cast<const T*>(p.q.ptr) + p.q.offset(b, q_row, s.h),
                                              p.q.row_stride, valid_q, d_chunks, tid);
    load_rows_async<QTile, kBlockM, kThreads>(sdo + buf * QTile::kElems,
                                              static_cast<const T*>(p.dout.ptr) + p.dout.offset(b, q_row, s.h),
                                              p.dout.row_stride, valid_q, d_chunks, tid);
    load_floats_async<kBlockM>(slse + buf * kBlockM, p.lse.ptr + p.lse.offset(b, q_row, s.h), valid_q, tid);
    load_floats_async<kBlockM>(sdsum + buf * kBlockM, args.dsum + s.h * p.total_q + global_q_row(p, b, seq(), m0),
                               valid_q, tid - kBlockM);
  };
  Step cur{hk * group, 0};
  if (steps > 0) issue_step(cur, 0);
  ptx::cp_async_commit();

  float dv[kDkvMF][kDkvNF][4], dk[kDkvMF][kDkvNF][4];
#pragma unroll
  for (int mf = 0; mf < kDkvMF; ++mf)
#pragma unroll
    for (int f = 0; f < kDkvNF; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mf][f][e] = dk[mf][f][e] = 0.0f;
  const int warp_key0 = n0 + sdp_n0;  // first key (in the sequence) of this warp's S / dP tile
  const typename Main::Lanes lanes(lane);
  const float one[2] = {1.0f, 1.0f};

  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();
    const Step next = next_step(cur);
    if (step + 1 < steps) {
      issue_step(next, buf ^ 1);
      ptx::cp_async_commit();
    }
    const int h = cur.h, m0 = (m_begin + cur.m) * kBlockM;
    cur = next;
    const int valid_q = sq_len - m0 < kBlockM ? sq_len - m0 : kBlockM;
    const uint32_t sq_addr = ptx::smem_addr(sq + buf * QTile::kElems);
    const uint32_t sdo_addr = ptx::smem_addr(sdo + buf * QTile::kElems);
    const float* lse = slse + buf * kBlockM;
    const float* dsum = sdsum + buf * kBlockM;
    const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);

    // Phase 1, per group of kChunkMF 16-row fragments of the warp tile (registers: bwd_tiled_mainloop.cuh).
    // Element (mf, f, e): query m0 + row0 + 16 mf + g + 8 (e / 2), key warp_key0 + 8 f + 2 t + e % 2
    // (row-major, attn/fragment_mask.cuh). Padding query rows (>= sq) are masked too: their LSE was zero-filled, so P
    // must not be trusted there; padding keys (>= sk) are outside every row's visible range.
    const bool needs_mask =
        valid_q < kBlockM || !tile_fully_visible(mask(), m0, m0 + kBlockM - 1, n0, n0 + kBlockN - 1);
#pragma unroll 1  // rolled: unrolled, the scheduler overlaps the groups and spills
    for (int chunk = 0; chunk < kSdpMF / kChunkMF; ++chunk) {
      const int row0 = sdp_m0 + 16 * kChunkMF * chunk;  // first query (in the step's tile) of the group
      float s[kChunkMF][kSdpNF][4], dp[kChunkMF][kSdpNF][4];
#pragma unroll
      for (int mf = 0; mf < kChunkMF; ++mf)
#pragma unroll
        for (int f = 0; f < kSdpNF; ++f)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mf][f][e] = dp[mf][f][e] = 0.0f;
      Main::scores_and_dp(s, dp, sq_addr, sk_addr, sdo_addr, sv_addr, lanes, row0, sdp_n0);

      // The element-wise step. The feature-free kernel instantiates it twice, so that tiles inside every
      // row's visible range (most of them) run it without the per-element visibility compares and
      // selects; the general kernel keeps one copy (the second made it spill: 0 -> 84 bytes at D = 64).
      const auto softmax_grad = [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int mf = 0; mf < kChunkMF; ++mf) {
          float lse2[2], d_row[2];
          [[maybe_unused]] RelRange vis[2];
          // diagonal(query) - warp_key0: |i + sk - sq - j| < 2^31 (supports_bwd), an int
          [[maybe_unused]] int rel_diag[2];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int q_local = row0 + 16 * mf + g + 8 * half;
            lse2[half] = lse[q_local] * kLog2e;
            d_row[half] = dsum[q_local];
            if constexpr (kMasked)
              vis[half] =
                  needs_mask ? visible_rel(mask(), m0 + q_local, warp_key0, Main::kSdpN) : RelRange{0, Main::kSdpN};
            if constexpr (kGeneral) rel_diag[half] = int(mask().diagonal(m0 + q_local) - warp_key0);
          }
          const auto hidden = [&](int half, int k) {
            if constexpr (kMasked) return k < vis[half].begin || k >= vis[half].end;
            return false;
          };
          if constexpr (!kGeneral) {
            const float scale_log2 = args.s.scale_log2, scale = p.score.softmax_scale;
#pragma unroll
            for (int f = 0; f < kSdpNF; ++f)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int half = e >> 1, k = 8 * f + 2 * t + (e & 1);
                float prob = ptx::exp2_approx(s[mf][f][e] * scale_log2 - lse2[half]);
                if (hidden(half, k)) prob = 0.0f;
                s[mf][f][e] = prob;
                dp[mf][f][e] = prob * (dp[mf][f][e] - d_row[half]) * scale;
              }
          } else {
#pragma unroll
            for (int f = 0; f < kSdpNF; ++f) {
              const uint32_t keep = args.s.dropout ? keep_bits_rowmajor(p.dropout, args.s.drop_threshold, b, h, p.heads,
                                                                        m0 + row0 + 16 * mf, warp_key0 + 8 * f, lane)
                                                   : 0u;
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int half = e >> 1, k = 8 * f + 2 * t + (e & 1);
                const float qk = s[mf][f][e];
                float prob = ptx::exp2_approx(score.logit2(qk, rel_diag[half] - k) - lse2[half]);
                if (hidden(half, k)) prob = 0.0f;
                const float z = args.s.dropout ? (kept_rowmajor(keep, e, lane) ? args.s.keep_scale : 0.0f) : 1.0f;
                s[mf][f][e] = prob * z;
                dp[mf][f][e] = prob * (dp[mf][f][e] * z - d_row[half]) * score.dlogit(qk);
              }
            }
          }
          store_acc<T, STile>(sp, s[mf], row0 + 16 * mf, sdp_n0, one, lane);
          store_acc<T, STile>(sds, dp[mf], row0 + 16 * mf, sdp_n0, one, lane);
        }
      };
      if (kGeneral || needs_mask)
        softmax_grad(std::true_type{});
      else
        softmax_grad(std::false_type{});
    }
    __syncthreads();  // P Z and dS of every warp are in shared memory

    // Phase 2.
    Main::keys_by_dims(dv, sp_addr, sdo_addr, lanes, dkv_n0, dkv_d0);
    Main::keys_by_dims(dk, sds_addr, sq_addr, lanes, dkv_n0, dkv_d0);

    // Phase 3, per group of kDqChunkMF 16-row fragments. Element (mf, f, e) of acc: query row
    // row0 + 16 mf + g + 8 (e / 2), column dq_d0 + 8 f + 2 t + e % 2; e = 0, 1 (and 2, 3) are adjacent
    // columns, an 8-byte aligned pair (head_dim and the column are even).
    if (args.dq_accum != nullptr) {
      const int64_t q_row0 = global_q_row(p, b, seq(), m0);
      const bool dq_full = valid_q == kBlockM && dq_d0 + Main::kDqD <= head_dim;
#pragma unroll 1  // rolled, as phase 1
      for (int chunk = 0; chunk < kDqMF / kDqChunkMF; ++chunk) {
        const int row0 = dq_m0 + 16 * kDqChunkMF * chunk;
        float acc[kDqChunkMF][kDqNF][4];
#pragma unroll
        for (int mf = 0; mf < kDqChunkMF; ++mf)
#pragma unroll
          for (int f = 0; f < kDqNF; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mf][f][e] = 0.0f;
        Main::queries_by_dims(acc, sds_addr, sk_addr, lanes, row0, dq_d0);
        // Full tiles (every row a query, every column inside the head dim: all but a sequence's last
        // tile and padded head dims) add without per-element bounds tests.
        const auto add_dq = [&](auto guarded) {
          constexpr bool kGuarded = decltype(guarded)::value;
#pragma unroll
          for (int mf = 0; mf < kDqChunkMF; ++mf)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = row0 + 16 * mf + g + 8 * half;
              if (kGuarded && row >= valid_q) continue;
              // Fragment f's 8 columns are the next 8-column block of dq_accum's layout (attn/dq_accum.h), 64
              // floats further; the 32 lanes of one atomic cover one block (two when the tile's first
              // global row is not a multiple of 8).
              float* dst = args.dq_accum + dq_accum_offset(q_row0 + row, h, dq_d0 + 2 * t, p.heads, p.head_dim);
#pragma unroll
              for (int f = 0; f < kDqNF; ++f)
                if (!kGuarded || dq_d0 + 8 * f + 2 * t < head_dim)
                  atomic_add2(dst + 64 * f, acc[mf][f][2 * half], acc[mf][f][2 * half + 1]);
            }
        };
        if (!kGeneral && dq_full)
          add_dq(std::false_type{});
        else
          add_dq(std::true_type{});
      }
    }
  }

  // dK, dV: staged through the K and V tiles (every warp is done with them after this barrier) and
  // stored as whole 16-byte chunks of rows.
  ptx::cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mf = 0; mf < kDkvMF; ++mf) {
    store_acc<T, KVTile>(sv, dv[mf], dkv_n0 + 16 * mf, dkv_d0, one, lane);
    store_acc<T, KVTile>(sk, dk[mf], dkv_n0 + 16 * mf, dkv_d0, one, lane);
  }
  __syncthreads();
  store_rows<KVTile, kBlockN, kThreads>(static_cast<T*>(p.dv.ptr) + p.dv.offset(b, k_row0, hk), p.dv.row_stride, sv, 0,
                                        valid_keys, d_chunks, tid);
  store_rows<KVTile, kBlockN, kThreads>(static_cast<T*>(p.dk.ptr) + p.dk.offset(b, k_row0, hk), p.dk.row_stride, sk, 0,
                                        valid_keys, d_chunks, tid);
}

// dK and dV (and dQ into dq_accum unless deterministic) for one (dtype, head-dim bucket) of the tiled
// partition; called by run_bwd (bwd_kernel.cuh).
template <typename T, int kHeadDim>
void launch_bwd_tiled(const BwdArgs& args, cudaStream_t stream) {
  // Threads and shared memory, the shapes used here, do not depend on kGeneral.
  using Main = BwdTiled<T, kHeadDim, true>;
  const int64_t blocks = int64_t(args.num_n_blocks) * args.p.heads_k * args.p.batch;
  if (blocks == 0) return;
  auto kernel =
      needs_general_kernel(args.p) ? bwd_tiled_kernel<T, kHeadDim, true> : bwd_tiled_kernel<T, kHeadDim, false>;
  allow_dynamic_smem(kernel, Main::kSmemBytes, args.p.device.index, "sm80 backward");
  kernel<<<grid_1d(blocks, "sm80 backward"), Main::kThreads, Main::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 backward kernel");
}

}  // namespace flashattn::detail::cuda::sm80
