#pragma once

// Shapes and warp-level products of the tiled backward kernel (bwd_tiled_kernel.cuh): FlashAttention-2's
// partition of a step (kBlockM queries against the CTA's kBlockN keys) into three phases, each split
// over all warps on its own grid of warp tiles (kernel_traits.h, BwdTile):
//   1. S = Q K^T and dP = dO V^T (queries x keys), warp tile kSdpM x kSdpN, row-major accumulators; the
//      softmax gradient turns them into P Z (Z = dropout keep / (1 - p)) and dS, stored to shared memory.
//   2. dV += (P Z)^T dO and dK += dS^T Q (keys x head dim), warp tile kDkvN x kDkvD: P and dS are read
//      transposed (ldmatrix.trans) as A operands; the accumulators live in registers for the whole loop.
//   3. dQ = dS K (queries x head dim), warp tile kDqM x kDqD, added to dq_accum with atomics.
// Each product is X (rows, read as A) times Y (read as B); a group of mf 16-row fragments by nf n8
// fragments loads mf A and nf / 2 B fragments per k16 step for mf * nf independent MMAs. Phase 1
// interleaves S and dP in one k loop (2 mf nf accumulators in flight), phase 2 runs 16 x 80 to 32 x 64
// tiles (8-16 in flight, 1.7-2.7 MMAs per ldmatrix).

#include <cstdint>

#include "cuda/common/ptx.h"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::detail::cuda::sm80 {

template <typename T, int kHeadDim, bool kGeneral>
struct BwdTiled {
  static constexpr BwdTile kTile = bwd_tile(kHeadDim);
  static_assert(kTile.tiled && valid(kTile), "bwd_tiled_kernel needs a valid tiled configuration");
  static constexpr int kBlockN = kTile.block_n;  // keys of the CTA
  static constexpr int kBlockM = kTile.block_m;  // queries per step
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = kTile.threads();

  // Warp tiles of the three phases (kernel_traits.h: BwdTile::*_tile_*, *_origin).
  static constexpr int kSdpM = kTile.sdp_tile_rows(), kSdpN = kTile.sdp_tile_cols();
  static constexpr int kDkvN = kTile.dkv_tile_rows(), kDkvD = kTile.dkv_tile_cols();
  static constexpr int kDqM = kTile.dq_tile_rows(), kDqD = kTile.dq_tile_cols();
  // Phases 1 and 3 work on this many 16-row fragments of their warp tile at a time (rolled loops over
  // the groups): two where registers allow (each B fragment then feeds two MMAs, and the group's
  // addressing and row statistics are paid once), else one. With tile_copy.cuh's loads two compile
  // without spills on sm_90a everywhere but the general instance at D = 128 (60 bytes) and D = 256 (72
  // bytes feature-free, 12 general); at D = 160 and 224 every warp tile is one fragment tall anyway.
  static constexpr bool kPairs = !(kHeadDim == 256 || (kGeneral && kHeadDim == 128));
  // The feature-free instance at D <= 64 takes phase 1's whole 64 x 32 warp tile at once, as FA2: a group
  // reloads the B operands (K, V), so two groups of 32 rows issued 16 more ldmatrix per warp-step, and the
  // D = 64 backward stalled on the shared-memory queue (MIO throttle 12% of the samples, FA2 5%). On
  // sm_90a it spills 44 bytes (loop invariants reloaded once per step) and measured 2-5% faster than two
  // groups over the D = 64 sweep (bench/NOTES.md). The sm_80 build spills 136 bytes inside the
  // loop with it and could not be measured (no A100 here), so it keeps two groups.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr bool kWholeSdpTile = false;
#else
  static constexpr bool kWholeSdpTile = kHeadDim <= 64 && !kGeneral;
#endif
  static constexpr int kSdpChunkMF = kWholeSdpTile ? kSdpM / 16 : kPairs && (kSdpM / 16) % 2 == 0 ? 2 : 1;
  static constexpr int kDqChunkMF = kPairs && (kDqM / 16) % 2 == 0 ? 2 : 1;
  static_assert((kSdpM / 16) % kSdpChunkMF == 0 && (kDqM / 16) % kDqChunkMF == 0, "whole groups of fragments");

  using KVTile = SmemTile<kBlockN, kHeadDim>;  // K, V, and the dK, dV staging of the epilogue
  using QTile = SmemTile<kBlockM, kHeadDim>;   // Q, dO
  using STile = SmemTile<kBlockM, kBlockN>;    // P Z, dS: queries x keys

  // Shared memory (elements of T, then fp32): K, V, Q[2], dO[2], P, dS, LSE[2], D[2]. Q, dO and the row
  // statistics are double-buffered: step i + 1's loads fly while step i computes.
  static constexpr int kOffV = KVTile::kElems;
  static constexpr int kOffQ = 2 * KVTile::kElems;
  static constexpr int kOffDO = kOffQ + 2 * QTile::kElems;
  static constexpr int kOffP = kOffDO + 2 * QTile::kElems;
  static constexpr int kOffDS = kOffP + STile::kElems;
  static constexpr int kElemsT = kOffDS + STile::kElems;
  static constexpr int kSmemBytes = kElemsT * int(sizeof(T)) + 4 * kBlockM * int(sizeof(float));
  static_assert(kSmemBytes == kTile.smem_bytes(), "kernel_traits.h and the kernel disagree on shared memory");
  static_assert((kElemsT * sizeof(T)) % 16 == 0, "the fp32 row statistics must start 16-byte aligned");
  static_assert(sizeof(T) == kElemBytes, "the sm80 kernels store 16-bit elements");
  static_assert(2 * kBlockM <= kThreads, "LSE and D rows are loaded by one thread each");

  // Lane parts of the ldmatrix addresses (fragments.cuh, smem_layout.h).
  struct Lanes {
    LdsmRows16<QTile> q_rows;    // Q, dO: A of S, dP (rows = queries); B of dV, dK (k = queries)
    LdsmRows8x2<KVTile> kv_nk;   // K, V: B of S, dP ([n = keys][k = dims])
    LdsmRows8x2<STile> s_trans;  // P, dS read transposed: A of dV, dK (m = keys, k = queries)
    LdsmRows16<STile> s_rows;    // dS: A of dQ (m = queries, k = keys)
    LdsmRows16<KVTile> k_kn;     // K: B of dQ ([k = keys][n = dims])
    __device__ __forceinline__ explicit Lanes(int lane)
        : q_rows(lane), kv_nk(lane), s_trans(lane), s_rows(lane), k_kn(lane) {}
  };

  // Phase 1: s += Q[m0..] K[n0..]^T and dp += dO[m0..] V[n0..]^T over the head dim (kMF 16-row
  // fragments of queries at m0, kNF n8 fragments of keys at n0), interleaved in one k loop so that
  // 2 kMF kNF independent accumulators are in flight (the MMA latency is hidden within the warp).
  template <int kMF, int kNF>
  __device__ __forceinline__ static void scores_and_dp(float (&s)[kMF][kNF][4], float (&dp)[kMF][kNF][4], uint32_t q,
                                                       uint32_t k, uint32_t dout, uint32_t v, const Lanes& L, int m0,
                                                       int n0) {
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t a_q[kMF][4], a_do[kMF][4];
#pragma unroll
      for (int mf = 0; mf < kMF; ++mf) {
        load_a<QTile>(a_q[mf], q, L.q_rows, m0 + 16 * mf, 16 * kk);
        load_a<QTile>(a_do[mf], dout, L.q_rows, m0 + 16 * mf, 16 * kk);
      }
#pragma unroll
      for (int np = 0; np < kNF / 2; ++np) {
        uint32_t b_k[4], b_v[4];
        load_b_nk<KVTile>(b_k, k, L.kv_nk, n0 + 16 * np, 16 * kk);
        load_b_nk<KVTile>(b_v, v, L.kv_nk, n0 + 16 * np, 16 * kk);
#pragma unroll
        for (int mf = 0; mf < kMF; ++mf) {
          mma_pair<T>(s[mf][2 * np], s[mf][2 * np + 1], a_q[mf], b_k);
          mma_pair<T>(dp[mf][2 * np], dp[mf][2 * np + 1], a_do[mf], b_v);
        }
      }
    }
  }

  // Phase 2: acc (kDkvN keys x kDkvD dims at (n0, d0)) += X^T Y over the step's queries, X the
  // queries x keys tile P Z or dS (A[key][query] = X[query][key]: load_a_trans), Y the queries x dims
  // tile dO or Q (B = [k = query][n = dim]: load_b_kn).
  template <int kMF, int kNF>
  __device__ __forceinline__ static void keys_by_dims(float (&acc)[kMF][kNF][4], uint32_t x, uint32_t y, const Lanes& L,
                                                      int n0, int d0) {
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t a[kMF][4];
#pragma unroll
      for (int mf = 0; mf < kMF; ++mf) load_a_trans<STile>(a[mf], x, L.s_trans, n0 + 16 * mf, 16 * kk);
#pragma unroll
      for (int np = 0; np < kNF / 2; ++np) {
        uint32_t b[4];
        load_b_kn<QTile>(b, y, L.q_rows, 16 * kk, d0 + 16 * np);
#pragma unroll
        for (int mf = 0; mf < kMF; ++mf) mma_pair<T>(acc[mf][2 * np], acc[mf][2 * np + 1], a[mf], b);
      }
    }
  }

  // Phase 3: acc (kDqM queries x kDqD dims at (m0, d0)) += dS K over the CTA's keys, dS row-major
  // (load_a) and K = [k = key][n = dim] (load_b_kn).
  template <int kMF, int kNF>
  __device__ __forceinline__ static void queries_by_dims(float (&acc)[kMF][kNF][4], uint32_t ds, uint32_t k,
                                                         const Lanes& L, int m0, int d0) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[kMF][4];
#pragma unroll
      for (int mf = 0; mf < kMF; ++mf) load_a<STile>(a[mf], ds, L.s_rows, m0 + 16 * mf, 16 * kk);
#pragma unroll
      for (int np = 0; np < kNF / 2; ++np) {
        uint32_t b[4];
        load_b_kn<KVTile>(b, k, L.k_kn, 16 * kk, d0 + 16 * np);
#pragma unroll
        for (int mf = 0; mf < kMF; ++mf) mma_pair<T>(acc[mf][2 * np], acc[mf][2 * np + 1], a[mf], b);
      }
    }
  }
};

}  // namespace flashattn::detail::cuda::sm80
