#pragma once

// Shapes and warp-level products of the backward main kernel (bwd_kernel.cuh).
//
// Ownership: warp w owns keys [16 w, 16 w + 16) of the CTA's key tile for the whole kernel. Per query
// tile it computes S^T = K Q^T and dP^T = V dO^T for its 16 keys and all kBlockM queries; the
// accumulators come out with keys as rows, which is the A-operand layout of dV += P^T dO and
// dK += dS^T Q (k = queries), so P^T and dS^T go from the softmax math to the next MMA in registers.
// dQ = dS K needs a sum over all keys of the tile, i.e. over warps: dS^T goes through shared memory
// once and the warps are re-partitioned over (16-query row groups x head-dim column groups).

#include <cstdint>

#include "cuda/common/ptx.h"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::detail::cuda::sm80 {

// The fallback's head dims (224, 256) need more registers than dK + dV together leave, so the kernel runs
// twice, once per accumulator (kernel_traits.h, bwd_rows_tile).
enum class BwdPass { dv_only, dk_only };

template <typename T, int kHeadDim, BwdPass kPass>
struct BwdMainloop {
  static constexpr BwdTile kTile = bwd_rows_tile(kHeadDim);
  static constexpr int kBlockN = kTile.block_n;  // keys of the CTA
  static constexpr int kBlockM = kTile.block_m;  // queries per step
  static constexpr int kThreads = kTile.threads();
  static constexpr bool kDoDV = kPass == BwdPass::dv_only;
  static constexpr bool kDoDK = kPass == BwdPass::dk_only;
  static constexpr int kQFrags = kBlockM / 8;    // n8 fragments of a row of S^T (queries)
  static constexpr int kDFrags = kHeadDim / 8;   // n8 fragments of a row of dK / dV
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps of S^T, dP^T (over the head dim)
  static constexpr int kMSteps = kBlockM / 16;   // k16 steps of dV, dK (over the queries)
  static constexpr int kNSteps = kBlockN / 16;   // k16 steps of dQ (over the keys)
  // dQ partition: warp w -> query rows 16 (w % kDqRowGroups), head-dim columns kDqCols * (w / kDqRowGroups);
  // its columns are done kDqSub at a time so the dQ accumulator stays small (at most 32 registers).
  static constexpr int kDqRowGroups = kTile.dq_row_groups();
  static constexpr int kDqCols = kTile.dq_cols_per_warp();
  static constexpr int kDqSub = kDqCols <= 64 ? kDqCols : kDqCols % 64 == 0 ? 64 : kDqCols % 32 == 0 ? 32 : 16;

  using KVTile = SmemTile<kBlockN, kHeadDim>;
  using QTile = SmemTile<kBlockM, kHeadDim>;
  using DSTile = SmemTile<kBlockN, kBlockM>;  // dS^T: keys x queries

  // Shared memory (elements of T, then fp32): K, V, Q[2], dO[2], dS^T, LSE[2], D[2]. Q, dO and the row
  // statistics are double-buffered: step i + 1's loads fly while step i computes.
  static constexpr int kOffV = KVTile::kElems;
  static constexpr int kOffQ = 2 * KVTile::kElems;
  static constexpr int kOffDO = kOffQ + 2 * QTile::kElems;
  static constexpr int kOffDS = kOffDO + 2 * QTile::kElems;
  static constexpr int kElemsT = kOffDS + DSTile::kElems;
  static constexpr int kSmemBytes = kElemsT * int(sizeof(T)) + 4 * kBlockM * int(sizeof(float));
  static_assert(kSmemBytes == kTile.smem_bytes(), "kernel_traits.h and the kernel disagree on shared memory");
  static_assert((kElemsT * sizeof(T)) % 16 == 0, "the fp32 row statistics must start 16-byte aligned");
  static_assert(sizeof(T) == kElemBytes, "the sm80 kernels store 16-bit elements");
  static_assert(kBlockN == 16 * kTile.warps, "one 16-key MMA fragment per warp");
  static_assert(2 * kBlockM <= kThreads, "LSE and D rows are loaded by one thread each");
  static_assert(kQFrags % 2 == 0 && kDFrags % 2 == 0 && kDqSub % 16 == 0 && kDqCols % kDqSub == 0,
                "B operands are loaded as pairs of n8 fragments");

  // Lane parts of the ldmatrix addresses (fragments.cuh).
  struct Lanes {
    LdsmRows16<KVTile> kv_a;   // K, V as A operands (keys x dims)
    LdsmRows8x2<QTile> q_nk;   // Q, dO as B operands of S^T, dP^T
    LdsmRows16<QTile> q_kn;    // Q, dO as B operands of dK, dV
    LdsmRows8x2<DSTile> ds_a;  // dS^T read transposed as the A operand of dQ
    LdsmRows16<KVTile> k_kn;   // K as the B operand of dQ
    __device__ __forceinline__ explicit Lanes(int lane) : kv_a(lane), q_nk(lane), q_kn(lane), ds_a(lane), k_kn(lane) {}
  };

  // acc (16 keys x kBlockM queries) += X[keys of this warp] . Y[queries]^T over the head dim, where X is
  // a key-major tile (K or V) and Y a query-major tile (Q or dO): S^T = K Q^T, dP^T = V dO^T.
  __device__ __forceinline__ static void keys_by_queries(float (&acc)[kQFrags][4], uint32_t x_keys, uint32_t y_queries,
                                                         const Lanes& L, int warp) {
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      uint32_t a[4];
      load_a<KVTile>(a, x_keys, L.kv_a, 16 * warp, 16 * kk);
#pragma unroll
      for (int np = 0; np < kQFrags / 2; ++np) {
        uint32_t b[4];
        load_b_nk<QTile>(b, y_queries, L.q_nk, 16 * np, 16 * kk);
        mma_pair<T>(acc[2 * np], acc[2 * np + 1], a, b);
      }
    }
  }

  // acc (16 keys x head dim) += A^T Y where A^T (16 keys x kBlockM queries) is held in registers as
  // the fp32 accumulator `keys_q` (P^T or dS^T) and Y (queries x head dim) is the tile dO or Q.
  __device__ __forceinline__ static void keys_by_dims(float (&acc)[kDFrags][4], const float (&keys_q)[kQFrags][4],
                                                      uint32_t y_queries, const Lanes& L) {
#pragma unroll
    for (int kk = 0; kk < kMSteps; ++kk) {
      uint32_t a[4];
      acc_to_a<T>(a, keys_q, kk);
#pragma unroll
      for (int dp = 0; dp < kDFrags / 2; ++dp) {
        uint32_t b[4];
        load_b_kn<QTile>(b, y_queries, L.q_kn, 16 * kk, 16 * dp);
        mma_pair<T>(acc[2 * dp], acc[2 * dp + 1], a, b);
      }
    }
  }

  // dQ columns [col0, col0 + kDqSub) of query rows [row0, row0 + 16): dS (read transposed from dS^T in
  // shared memory) times K over the CTA's keys.
  __device__ __forceinline__ static void dq_slice(float (&acc)[kDqSub / 8][4], uint32_t ds_t, uint32_t k_tile,
                                                  const Lanes& L, int row0, int col0) {
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk) {
      uint32_t a[4];
      load_a_trans<DSTile>(a, ds_t, L.ds_a, row0, 16 * kk);
#pragma unroll
      for (int np = 0; np < kDqSub / 16; ++np) {
        uint32_t b[4];
        load_b_kn<KVTile>(b, k_tile, L.k_kn, 16 * kk, col0 + 16 * np);
        mma_pair<T>(acc[2 * np], acc[2 * np + 1], a, b);
      }
    }
  }
};

}  // namespace flashattn::detail::cuda::sm80
