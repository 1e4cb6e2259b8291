#pragma once

// Deterministic dQ: one CTA per (query tile, head, sequence) loops over the key tiles its rows can see,
// recomputing S = Q K^T, P, dP = dO V^T and dS, and accumulates dQ += dS K in registers (fixed order, no
// atomics: bitwise reproducible). Used instead of the main kernel's atomicAdd when the call asks for
// `deterministic`; the main kernel then computes only dK and dV.
//
// Ownership: warp w owns query rows [16 w, 16 w + 16) (row-major S, as in the forward). Q and dO are
// loaded once; K and V are double-buffered (tile n + 1 loads while tile n computes; the barrier at the
// top of each tile certifies every warp finished the buffer being refilled).

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
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/smem_layout.h"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

template <typename T, int kHeadDim>
struct DqShape {
  static constexpr DqTile kTile = dq_tile(kHeadDim);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kThreads = kTile.threads();
  static constexpr int kNFrags = kBlockN / 8, kDFrags = kHeadDim / 8;
  static constexpr int kDSteps = kHeadDim / 16, kNSteps = kBlockN / 16;
  using QTile = SmemTile<kBlockM, kHeadDim>;
  using KVTile = SmemTile<kBlockN, kHeadDim>;
  // Shared memory: Q, dO, K[2], V[2].
  static constexpr int kOffDO = QTile::kElems;
  static constexpr int kOffK = 2 * QTile::kElems;
  static constexpr int kOffV = kOffK + 2 * KVTile::kElems;
  static constexpr int kSmemBytes = (kOffV + 2 * KVTile::kElems) * int(sizeof(T));
  static_assert(kSmemBytes == kTile.smem_bytes(), "kernel_traits.h and the kernel disagree on shared memory");
  static_assert(kNFrags % 2 == 0 && kDFrags % 2 == 0, "B operands are loaded as pairs of n8 fragments");

  // Lane parts of the ldmatrix addresses (fragments.cuh).
  struct Lanes {
    LdsmRows16<QTile> q_a;      // Q, dO as A operands
    LdsmRows8x2<KVTile> kv_nk;  // K, V as B operands of S, dP
    LdsmRows16<KVTile> k_kn;    // K as the B operand of dQ
    __device__ __forceinline__ explicit Lanes(int lane) : q_a(lane), kv_nk(lane), k_kn(lane) {}
  };

  // acc (this warp's 16 query rows x kBlockN keys) += X[rows] Y^T over the head dim: S = Q K^T, dP = dO V^T.
  __device__ __forceinline__ static void rows_by_keys(float (&acc)[kNFrags][4], uint32_t x_rows, uint32_t y_keys,
                                                      const Lanes& L, int warp) {
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      uint32_t a[4];
      load_a<QTile>(a, x_rows, L.q_a, 16 * warp, 16 * kk);
#pragma unroll
      for (int np = 0; np < kNFrags / 2; ++np) {
        uint32_t b[4];
        load_b_nk<KVTile>(b, y_keys, L.kv_nk, 16 * np, 16 * kk);
        mma_pair<T>(acc[2 * np], acc[2 * np + 1], a, b);
      }
    }
  }
};

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(DqShape<T, kHeadDim>::kThreads, 1)
    bwd_dq_kernel(const __grid_constant__ BwdArgs args) {
  using Shape = DqShape<T, kHeadDim>;
  using QTile = typename Shape::QTile;
  using KVTile = typename Shape::KVTile;
  constexpr int kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN, kThreads = Shape::kThreads;
  constexpr int kNFrags = Shape::kNFrags, kDFrags = Shape::kDFrags;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sdo = sq + Shape::kOffDO;
  T* sk = sq + Shape::kOffK;  // [2][KVTile::kElems]
  T* sv = sq + Shape::kOffV;  // [2][KVTile::kElems]
  const uint32_t sq_addr = ptx::smem_addr(sq), sdo_addr = ptx::smem_addr(sdo);

  const BwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  int64_t block = blockIdx.x;
  const int m_block = args.num_m_blocks - 1 - int(block % args.num_m_blocks);
  block /= args.num_m_blocks;
  const int64_t h = block % p.heads;
  const int64_t b = block / p.heads;
  const SeqRange seq = seq_range(p, b);
  const int64_t m0 = int64_t(m_block) * kBlockM;
  if (m0 >= seq.sq) return;  // rows past a varlen sequence belong to the next one
  const int valid_rows = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
  const int64_t hk = h / args.s.group;
  const int d_chunks = int(p.head_dim / 8);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);
  const Range keys = keys_for_rows(mask, m0, m0 + valid_rows - 1);
  const int n_begin = int(keys.begin / kBlockN);
  const int n_end = keys.end > keys.begin ? int((keys.end + kBlockN - 1) / kBlockN) : n_begin;

  const int64_t q_row = seq.q_start + m0;
  load_rows_async<QTile, kBlockM, kThreads>(sq, static_cast<const T*>(p.q.ptr) + p.q.offset(b, q_row, h),
                                            p.q.row_stride, valid_rows, d_chunks, tid);
  load_rows_async<QTile, kBlockM, kThreads>(sdo, static_cast<const T*>(p.dout.ptr) + p.dout.offset(b, q_row, h),
                                            p.dout.row_stride, valid_rows, d_chunks, tid);
  const T* k_seq = static_cast<const T*>(p.k.ptr) + p.k.offset(b, seq.k_start, hk);
  const T* v_seq = static_cast<const T*>(p.v.ptr) + p.v.offset(b, seq.k_start, hk);
  const auto load_kv = [&](int n, int buf) {
    const int64_t first = int64_t(n) * kBlockN;
    const int rows = int(seq.sk - first < kBlockN ? seq.sk - first : kBlockN);
    load_rows_async<KVTile, kBlockN, kThreads>(sk + buf * KVTile::kElems, k_seq + first * p.k.row_stride,
                                               p.k.row_stride, rows, d_chunks, tid);
    load_rows_async<KVTile, kBlockN, kThreads>(sv + buf * KVTile::kElems, v_seq + first * p.v.row_stride,
                                               p.v.row_stride, rows, d_chunks, tid);
  };
  if (n_begin < n_end) load_kv(n_begin, 0);
  ptx::cp_async_commit();

  // Row statistics of this thread's rows g and g + 8: LSE (base 2) and D. Rows past the sequence get
  // LSE = +inf, so their P is exactly 0.
  const int64_t warp_row0 = m0 + 16 * warp;
  float lse2[2], d_row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = warp_row0 + g + 8 * half;
    const bool in = row < seq.sq;
    lse2[half] = in ? p.lse.ptr[p.lse.offset(b, seq.q_start + row, h)] * kLog2e : __builtin_huge_valf();
    d_row[half] = in ? args.dsum[h * p.total_q + global_q_row(p, b, seq, row)] : 0.0f;
  }
  const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);
  const typename Shape::Lanes lanes(lane);

  float dq[kDFrags][4];
#pragma unroll
  for (int f = 0; f < kDFrags; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[f][e] = 0.0f;

  for (int n = n_begin; n < n_end; ++n) {
    const int buf = (n - n_begin) & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (n + 1 < n_end) {
      load_kv(n + 1, buf ^ 1);
      ptx::cp_async_commit();
    }
    const uint32_t sk_addr = ptx::smem_addr(sk + buf * KVTile::kElems);
    const uint32_t sv_addr = ptx::smem_addr(sv + buf * KVTile::kElems);
    float s[kNFrags][4], dp[kNFrags][4];
#pragma unroll
    for (int f = 0; f < kNFrags; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[f][e] = dp[f][e] = 0.0f;
    Shape::rows_by_keys(s, sq_addr, sk_addr, lanes, warp);
    Shape::rows_by_keys(dp, sdo_addr, sv_addr, lanes, warp);

    // Element (f, e): query warp_row0 + g + 8 (e / 2), key key0 + 8 f + 2 t + e % 2 (attn/fragment_mask.cuh).
    const int64_t key0 = int64_t(n) * kBlockN;
    const bool needs_mask = !tile_fully_visible(mask, m0, m0 + valid_rows - 1, key0, key0 + kBlockN - 1);
    RelRange vis[2];
    int64_t diag[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = warp_row0 + g + 8 * half;
      vis[half] = needs_mask ? visible_rel(mask, row, key0, kBlockN) : RelRange{0, kBlockN};
      diag[half] = mask.diagonal(row);
    }
#pragma unroll
    for (int f = 0; f < kNFrags; ++f) {
      const uint32_t keep = args.s.dropout ? keep_bits_rowmajor(p.dropout, args.s.drop_threshold, b, h, p.heads,
                                                                warp_row0, key0 + 8 * f, lane)
                                           : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1, k = 8 * f + 2 * t + (e & 1);
        const float qk = s[f][e];
        float prob = ptx::exp2_approx(score.logit2(qk, diag[half] - (key0 + k)) - lse2[half]);
        if (k < vis[half].begin || k >= vis[half].end) prob = 0.0f;
        const float z = args.s.dropout ? (kept_rowmajor(keep, e, lane) ? args.s.keep_scale : 0.0f) : 1.0f;
        s[f][e] = prob * (dp[f][e] * z - d_row[half]) * score.dlogit(qk);
      }
    }

    // dQ += dS K: dS from registers (A operand), K read transposed ([keys][dims] is B = [k][n]).
#pragma unroll
    for (int kk = 0; kk < Shape::kNSteps; ++kk) {
      uint32_t a[4];
      acc_to_a<T>(a, s, kk);
#pragma unroll
      for (int dpair = 0; dpair < kDFrags / 2; ++dpair) {
        uint32_t bk[4];
        load_b_kn<KVTile>(bk, sk_addr, lanes.k_kn, 16 * kk, 16 * dpair);
        mma_pair<T>(dq[2 * dpair], dq[2 * dpair + 1], a, bk);
      }
    }
  }

  // Epilogue: stage this warp's rows in its own rows of the Q tile (only it reads them), then store.
  ptx::cp_async_wait<0>();
  __syncthreads();
  const float one[2] = {1.0f, 1.0f};
  store_acc<T, QTile>(sq, dq, 16 * warp, 0, one, lane);
  __syncwarp();
  store_rows<QTile, 16, 32>(static_cast<T*>(p.dq.ptr) + p.dq.offset(b, q_row + 16 * warp, h), p.dq.row_stride, sq,
                            16 * warp, valid_rows - 16 * warp, d_chunks, lane);
}

// The deterministic dQ for one (dtype, head-dim bucket); instantiated in bwd_hdim<D>.cu.
template <typename T, int kHeadDim>
void run_bwd_dq(BwdArgs args, cudaStream_t stream) {
  using Shape = DqShape<T, kHeadDim>;
  args.num_m_blocks = int(ceil_div(args.p.seqlen_q, Shape::kBlockM));
  const int64_t blocks = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (blocks == 0) return;
  auto kernel = bwd_dq_kernel<T, kHeadDim>;
  allow_dynamic_smem(kernel, Shape::kSmemBytes, args.p.device.index, "sm80 backward dQ");
  kernel<<<grid_1d(blocks, "sm80 backward dQ"), Shape::kThreads, Shape::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 backward dQ kernel");
}

}  // namespace flashattn::detail::cuda::sm80
