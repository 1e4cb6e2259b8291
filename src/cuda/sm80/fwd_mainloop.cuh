#pragma once

// The forward mainloop's pieces: tile shapes, the two warp-level products of one K/V tile
// (S = Q K^T, O += P V) and the tile loads. fwd_kernel.cuh strings them into the pipeline.
//
// Ownership (fixed for the whole kernel): warp w owns query rows [w * kWarpRows, (w + 1) * kWarpRows) of
// the CTA's Q tile, as kMFrags 16-row MMA fragments. Every warp reads all of the K and V tiles.

#include <cstdint>

#include "cuda/attn/paged_keys.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/smem_layout.h"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

// kGeneral: the instance for calls with dropout, softcap or ALiBi (attn/score_args.h); kPaired: the tile two CTAs of
// which share an SM (kernel_traits.h). Both only change the tile.
template <typename T, int kHeadDim, bool kGeneral, bool kPaired = false>
struct FwdMainloop {
  static constexpr FwdTile kTile = fwd_tile(kHeadDim, kGeneral, kPaired);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kThreads = kTile.threads();
  static constexpr int kMFrags = kTile.m_frags;
  static constexpr int kWarpRows = kTile.warp_rows();
  static constexpr bool kQInRegs = kTile.q_in_regs;
  static constexpr int kNFrags = kBlockN / 8;     // n8 fragments of a row of S
  static constexpr int kDFrags = kHeadDim / 8;    // n8 fragments of a row of O
  static constexpr int kQKSteps = kHeadDim / 16;  // k16 steps of S = Q K^T (over the head dim)
  static constexpr int kPVSteps = kBlockN / 16;   // k16 steps of O += P V (over the keys)

  using QTile = SmemTile<kBlockM, kHeadDim>;
  using KVTile = SmemTile<kBlockN, kHeadDim>;
  // Shared memory: Q (also the output staging area in the epilogue), one K tile, one V tile.
  static constexpr int kSmemBytes = (QTile::kElems + 2 * KVTile::kElems) * int(sizeof(T));
  static_assert(kSmemBytes == kTile.smem_bytes(), "kernel_traits.h and the kernel disagree on shared memory");
  static_assert(sizeof(T) == kElemBytes, "the sm80 kernels store 16-bit elements");
  static_assert(kNFrags % 2 == 0 && kDFrags % 2 == 0, "B operands are loaded as pairs of n8 fragments");
  // LdsmAt (Lanes below) needs each tile to start on a panel row (at most 128 bytes): shared memory is
  // 128-byte aligned and the K and V tiles follow Q.
  static_assert(QTile::kElems * int(sizeof(T)) % 128 == 0 && KVTile::kElems * int(sizeof(T)) % 128 == 0,
                "the K and V tiles must start on a 128-byte boundary");

  // Q fragments kept in registers for the whole kernel (kQInRegs), else re-read from shared memory.
  using QFrags = uint32_t[kQInRegs ? kMFrags : 1][kQInRegs ? kQKSteps : 1][4];

  // This lane's ldmatrix addresses into the three tiles (smem_layout.h, fragments.cuh); q's rows count from
  // the warp's first row.
  // The code-shape knobs of this bucket (kernel_traits.h, fwd_knobs).
  static constexpr FwdKnobs kKnobs = fwd_knobs(kHeadDim, kGeneral);
  static constexpr bool kPinLanes = kKnobs.pin_lanes;  // pinned ldmatrix addresses (smem_layout.h, LdsmAt)
  struct Lanes {
    LdsmAt<QTile, LanePattern::kRows16, kPinLanes> q;
    LdsmAt<KVTile, LanePattern::kRows8x2, kPinLanes> k;
    LdsmAt<KVTile, LanePattern::kRows16, kPinLanes> v;
    __device__ __forceinline__ Lanes(uint32_t sq, uint32_t sk, uint32_t sv, int lane, int warp_row0)
        : q(sq, lane, warp_row0), k(sk, lane), v(sv, lane) {}
  };

  __device__ __forceinline__ static void load_q_frags(QFrags& q, const Lanes& L) {
    if constexpr (kQInRegs) {
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
        for (int kk = 0; kk < kQKSteps; ++kk) load_a<QTile>(q[mf][kk], L.q, 16 * mf, 16 * kk);
    }
  }

  // The cp.async of one K or V tile (tile_copy.cuh), issued in row steps.
  using KVCopy = RowsCopy<KVTile, kBlockN, kThreads, T>;
  // V's copies spread over the first half of S = Q K^T (one row step every kVEvery k-steps) instead of one
  // burst before it.
  static constexpr bool kSpreadV = kKnobs.spread_v;
  // P computed one k16 slice at a time inside P V (pv_exp) instead of the whole tile's P first.
  static constexpr bool kExpInPv = kKnobs.exp_in_pv;
  static constexpr int kVEvery = kQKSteps / (2 * KVCopy::kSteps) > 0 ? kQKSteps / (2 * KVCopy::kSteps) : 1;

  // s = Q K^T for the warp's rows and the whole K tile (s must be zero on entry); with kSpread (kSpreadV
  // unless the kernel loads V another way: paged K/V) it also issues `v_copy` between its k-steps.
  template <bool kSpread = kSpreadV>
  __device__ __forceinline__ static void qk(float (&s)[kMFrags][kNFrags][4], const QFrags& q, const Lanes& L,
                                            KVCopy& v_copy) {
#pragma unroll
    for (int kk = 0; kk < kQKSteps; ++kk) {
      if constexpr (kSpread) {
        if (kk % kVEvery == 0 && kk / kVEvery < KVCopy::kSteps) v_copy.template issue_next<1>();
      }
      uint32_t a[kMFrags][4];
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mf][i] = q[mf][kk][i];
        } else {
          load_a<QTile>(a[mf], L.q, 16 * mf, 16 * kk);
        }
      }
#pragma unroll
      for (int np = 0; np < kNFrags / 2; ++np) {
        uint32_t b[4];
        load_b_nk<KVTile>(b, L.k, 16 * np, 16 * kk);
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf) mma_pair<T>(s[mf][2 * np], s[mf][2 * np + 1], a[mf], b);
      }
    }
    if constexpr (kSpread) v_copy.template issue_next<KVCopy::kSteps>();  // any steps the k-steps left
  }

  // o += P V with P (fp32, this warp's rows) rounded to T straight from the S registers.
  __device__ __forceinline__ static void pv(float (&o)[kMFrags][kDFrags][4], const float (&p)[kMFrags][kNFrags][4],
                                            const Lanes& L) {
    pv_slices(o, p, L, [](int, int) {});
  }

  // o += P V as pv, with P computed from the scores one k16 slice at a time just before that slice's MMAs
  // (softmax.begin_update done, softmax.end_update after): the slice's exp2 then sit between the MMAs of
  // the previous slice instead of all ahead of the product, so the MUFU and tensor pipes overlap.
  template <typename Softmax>
  __device__ __forceinline__ static void pv_exp(float (&o)[kMFrags][kDFrags][4], float (&s)[kMFrags][kNFrags][4],
                                                Softmax& softmax, const Lanes& L) {
    pv_slices(o, s, L, [&](int kk, int mf) {
      softmax.exp_frag(s, mf, 2 * kk);
      softmax.exp_frag(s, mf, 2 * kk + 1);
    });
  }

  // The loop of pv and pv_exp: `before_slice(kk, mf)` runs just before fragment row mf of k16 slice kk of P
  // is rounded into an A operand.
  template <typename P, typename BeforeSlice>
  __device__ __forceinline__ static void pv_slices(float (&o)[kMFrags][kDFrags][4], P& p, const Lanes& L,
                                                   BeforeSlice&& before_slice) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      uint32_t a[kMFrags][4];
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf) {
        before_slice(kk, mf);
        acc_to_a<T>(a[mf], p[mf], kk);
      }
#pragma unroll
      for (int dp = 0; dp < kDFrags / 2; ++dp) {
        uint32_t b[4];
        load_b_kn<KVTile>(b, L.v, 16 * kk, 16 * dp);
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf) mma_pair<T>(o[mf][2 * dp], o[mf][2 * dp + 1], a[mf], b);
      }
    }
  }

  // The copy of K or V tile `n` of a sequence with sk keys (rows past sk and dims past head_dim are 0).
  __device__ __forceinline__ static KVCopy kv_copy(T* tile, const T* seq_base, int64_t row_stride, int n, int64_t sk,
                                                   int d_chunks, int tid) {
    const int64_t first = int64_t(n) * kBlockN;
    const int rows = int(sk - first < kBlockN ? sk - first : kBlockN);
    return KVCopy(tile, seq_base + first * row_stride, row_stride, rows, d_chunks, tid);
  }
  // cp.async of the whole tile at once.
  __device__ __forceinline__ static void load_kv(T* tile, const T* seq_base, int64_t row_stride, int n, int64_t sk,
                                                 int d_chunks, int tid) {
    const int64_t first = int64_t(n) * kBlockN;
    const int rows = int(sk - first < kBlockN ? sk - first : kBlockN);
    load_rows_async<KVTile, kBlockN, kThreads>(tile, seq_base + first * row_stride, row_stride, rows, d_chunks, tid);
  }
  // load_kv for paged K or V (attn/paged_keys.h): `head_base` is the cache's base plus the kv head's offset.
  // `tile_in_page` (page_size a multiple of kBlockN): the tile lies in one page, one block-table read and
  // the strided copy; otherwise every row is looked up in its page.
  __device__ __forceinline__ static void load_kv_paged(T* tile, const T* head_base, const PagedKeyRows& pages,
                                                       int64_t page_stride, int64_t row_stride, bool tile_in_page,
                                                       int n, int64_t sk, int d_chunks, int tid) {
    const int first = n * kBlockN;
    const int rows = int(sk - first < kBlockN ? sk - first : kBlockN);
    if (tile_in_page) {
      load_rows_async<KVTile, kBlockN, kThreads>(tile, head_base + pages.row_offset(first, page_stride, row_stride),
                                                 row_stride, rows, d_chunks, tid);
    } else {
      load_scattered_rows_async<KVTile, kBlockN, kThreads>(
          tile, head_base, [&](int r) { return pages.row_offset(first + r, page_stride, row_stride); }, rows, d_chunks,
          tid);
    }
  }
};

}  // namespace flashattn::detail::cuda::sm80
