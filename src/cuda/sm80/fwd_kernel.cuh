#pragma once

// FlashAttention-2 forward on sm80+ tensor cores, composed of the mainloop's products and loads
// (fwd_mainloop.cuh), the epilogue (fwd_epilogue.cuh) and the tile scheduler (fwd_tile_scheduler.cuh);
// fwd_launch.cuh picks the instance and the grid. A CTA computes work tiles of kBlockM query rows of one
// head and sequence, listed so that the CTAs sharing a K/V head run together and share it through L2,
// heavier causal tiles first (attn/tile_order.h): one tile per CTA, or, in the paired D = 256 instance on
// a call whose tiles all cost the same, a grid of as many CTAs as the device holds at once, each walking
// the list with the grid's stride (fwd_persistent).
//
// Pipeline (one buffer each for K and V, loads always one product ahead, as FlashAttention-2):
//   first tile: cp.async Q, K[first]                                        -> wait, barrier
//   key tile n: cp.async V[n] (*)        | S = Q K[n]^T                      -> wait, barrier
//               cp.async K[n+1]          | mask, online softmax, O += P V[n] -> wait, barrier (next key tile)
//   last n:     cp.async the next work tile's Q and K[first] instead of K[n+1], so that their latency
//               hides behind this tile's softmax, P V and epilogue (the persistent grid; FlashAttention-2
//               pays it at every CTA's start, where at short sequences it is several percent of the time)
// The V load overlaps the QK^T product and the next K load overlaps softmax and PV. (*) At D = 96 and 128
// V's copies are issued between the first k-steps of QK^T instead of before it, and at D = 32, 64, 160 and 192
// (feature-free) the softmax's exp2 run slice by slice inside P V (fwd_mainloop.cuh). Each barrier both
// publishes the landed tile and certifies that every warp finished reading the buffer about to be
// overwritten (K and Q after QK^T, V after PV), so one buffer per operand suffices and shared memory stays
// at Q + K + V (128 KB at head dim 256, within sm80's 163 KB). The epilogue stages O through the Q tile,
// or, when the next work tile's rows are already landing there, stores it from registers after a quad
// transpose (fwd_epilogue.cuh).
//
// Tiles left of / right of the visible band of the CTA's rows are never visited; only tiles that
// straddle a mask boundary (or the sequence end) run the element-wise mask (attn/tile_range.h).
//
// kGeneral = false (attn/score_args.h, needs_general_fwd): no dropout, softcap or ALiBi, and a positive scale. The
// scores stay raw dot products until the softmax, which folds the scale into exp2's FFMA; dropout and the
// score transform are compiled out, and the tile may be larger (kernel_traits.h).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/philox.h"
#include "common/score.h"
#include "cuda/attn/dropout.cuh"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/softmax.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/debug.h"
#include "cuda/sm80/fwd_epilogue.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"

namespace flashattn::detail::cuda::sm80 {

// kPersistent: the instance that walks the tile list with a grid of resident CTAs (fwd_persistent); the
// other runs one tile per CTA. kPagedKV: K and V are read through the block table (FwdProblem::paged,
// FwdMainloop::load_kv_paged), V's copies in one burst; the other instances compile none of it.
template <typename T, int kHeadDim, bool kGeneral, bool kPaired, bool kPersistent, bool kPagedKV = false>
__global__ void __launch_bounds__(FwdMainloop<T, kHeadDim, kGeneral, kPaired>::kThreads, kPaired ? 2 : 1)
    fwd_kernel(const __grid_constant__ FwdArgs args) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  using Place = FwdTilePlace<Main, kPersistent>;
  using Scheduler = FwdTileScheduler<kPersistent>;
  static_assert(!kPersistent || fwd_persistent<kHeadDim, kPaired>(), "no persistent instance for this tile");
  static_assert(!(kPersistent && kPagedKV), "paged calls are varlen, which the persistent grid never runs");
  constexpr bool kSpreadV = Main::kSpreadV && !kPagedKV;
  constexpr int kBlockN = Main::kBlockN, kMFrags = Main::kMFrags;
  constexpr int kNFrags = Main::kNFrags, kDFrags = Main::kDFrags;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + Main::QTile::kElems;
  T* sv = sk + Main::KVTile::kElems;
  const uint32_t sq_addr = ptx::smem_addr(sq), sk_addr = ptx::smem_addr(sk), sv_addr = ptx::smem_addr(sv);

  const FwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_row0 = warp * Main::kWarpRows;
  const int d_chunks = int(p.head_dim / 8);
  FwdCtaTracer tracer;  // debug.h: empty unless FLASHATTN_SM80_TRACE

  // A grid smaller than the tile list (persistent, run_fwd_instance) walks it with a stride of the grid;
  // each tile's Q and first K tile are then loaded during the previous tile's last softmax, P V and
  // epilogue (`prefetched`) instead of after its epilogue, where nothing else would hide their latency.
  // The next tile's loads, written by thread 0 at the start of a tile into slot `parity` and read by every
  // thread in its last key tile; the slot is written again two tiles later, after barriers that order it
  // after every thread's read.
  __shared__ FwdTileLoads<T> next_loads[kPersistent ? 2 : 1];
  bool prefetched = false;
  int parity = 0;
  for (int tile = Scheduler::first(); tile < args.num_tiles; tile = Scheduler::next(tile)) {
    const Place t(args, tile);
    if (t.valid_rows == 0) continue;
    if (!prefetched) {
      // A previous tile of this CTA that loaded nothing ahead (no keys: seqlen_k = 0) staged its output in
      // Q's tile: every warp must be done reading it back before Q's rows are loaded over it.
      if (kPersistent && tile != Scheduler::first()) __syncthreads();
      if constexpr (kPagedKV) {
        load_rows_async<typename Main::QTile, Main::kBlockM, Main::kThreads>(
            sq, t.template q_rows<T>(p), p.q.row_stride, t.valid_rows, d_chunks, tid);
        if (t.n_begin < t.n_end)
          Main::load_kv_paged(sk, t.template k_head<T>(args), t.pages(args), p.k.batch_stride, p.k.row_stride,
                              args.page_tiles, t.n_begin, t.seq.sk, d_chunks, tid);
        ptx::cp_async_commit();
      } else {
        t.template loads<T>(args).template issue<Main>(args, sq, sk, tid);
      }
    }
    prefetched = false;
    parity ^= 1;
    tracer.tile(int(t.m0 / Main::kBlockM));
    const Mask mask = make_mask(p.score, t.seq.sq, t.seq.sk);
    const T* k_seq = t.template k_rows<T>(args);
    const T* v_seq = t.template v_rows<T>(args);

    float o[kMFrags][kDFrags][4];
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int f = 0; f < kDFrags; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mf][f][e] = 0.0f;
    OnlineSoftmax<kMFrags> softmax;
    softmax.init();
    const ScoreFn score = ScoreFn::make(p.score, args.s, t.b, t.h);
    const int64_t warp_first_row = t.m0 + warp_row0;
    const auto prefetch_next = [&] {
      const FwdTileLoads<T> next = next_loads[parity];
      if (next.valid_rows > 0) {
        next.template issue<Main>(args, sq, sk, tid);
        prefetched = true;
      }
    };

    // Q and K[first] landed; the barrier also ends every warp's P V of the previous tile on V.
    ptx::cp_async_wait<0>();
    __syncthreads();
    // Written after that barrier, so that no warp waits on this thread there; read after the barrier
    // that follows Q K^T in this tile's last key tile.
    if (kPersistent && tid == 0) {
      FwdTileLoads<T> next;
      if (Scheduler::has_next(tile, args.num_tiles)) next = Place(args, Scheduler::next(tile)).template loads<T>(args);
      next_loads[parity] = next;
    }
    const typename Main::Lanes lanes(sq_addr, sk_addr, sv_addr, lane, warp_row0);
    typename Main::QFrags q;
    Main::load_q_frags(q, lanes);

    for (int n = t.n_begin; n < t.n_end; ++n) {
      if (n > t.n_begin) {
        ptx::cp_async_wait<0>();  // K[n] landed; the barrier also ends every warp's PV on V[n-1]
        __syncthreads();
      }
      // V[n]'s copies: issued here in one burst, or by qk between its k-steps (kSpreadV, fwd_mainloop.cuh;
      // without it v_copy is never used and compiles away).
      typename Main::KVCopy v_copy = Main::kv_copy(sv, v_seq, p.v.row_stride, n, t.seq.sk, d_chunks, tid);
      if constexpr (kPagedKV) {
        Main::load_kv_paged(sv, t.template v_head<T>(args), t.pages(args), p.v.batch_stride, p.v.row_stride,
                            args.page_tiles, n, t.seq.sk, d_chunks, tid);
        ptx::cp_async_commit();
      } else if constexpr (!Main::kSpreadV) {
        Main::load_kv(sv, v_seq, p.v.row_stride, n, t.seq.sk, d_chunks, tid);
        ptx::cp_async_commit();
      }

      float s[kMFrags][kNFrags][4];
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
        for (int f = 0; f < kNFrags; ++f)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mf][f][e] = 0.0f;
      Main::template qk<kSpreadV>(s, q, lanes, v_copy);
      if constexpr (kSpreadV) ptx::cp_async_commit();

      ptx::cp_async_wait<0>();  // V[n] landed; the barrier also ends every warp's QK^T on K[n] and reads of Q
      __syncthreads();
      if (n + 1 < t.n_end) {
        if constexpr (kPagedKV)
          Main::load_kv_paged(sk, t.template k_head<T>(args), t.pages(args), p.k.batch_stride, p.k.row_stride,
                              args.page_tiles, n + 1, t.seq.sk, d_chunks, tid);
        else
          Main::load_kv(sk, k_seq, p.k.row_stride, n + 1, t.seq.sk, d_chunks, tid);
        ptx::cp_async_commit();
      } else if constexpr (kPersistent) {
        prefetch_next();
      }

      const int64_t key0 = int64_t(n) * kBlockN;
      if constexpr (kGeneral) logits_rowmajor(s, score, mask, warp_first_row, key0, lane);
      if (!tile_fully_visible(mask, t.m0, t.m0 + t.valid_rows - 1, key0, key0 + kBlockN - 1))
        mask_rowmajor(s, mask, warp_first_row, key0, lane);

      float rescale[kMFrags][2];
      if constexpr (Main::kExpInPv)
        softmax.begin_update(s, rescale, args.s.scale_log2);  // P itself is computed in pv_exp
      else
        softmax.update(s, rescale, kGeneral ? 1.0f : args.s.scale_log2);
      // Once the running maxima settle (most tiles of a long row), every factor is exactly 1 and the
      // kDFrags * 4 * kMFrags multiplies of O would be identities: skip them when no row of the warp moved
      // (a warp-uniform vote, so the branch does not diverge; the result is bitwise the same).
      bool moved = false;
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf) moved = moved || rescale[mf][0] != 1.0f || rescale[mf][1] != 1.0f;
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
          for (int f = 0; f < kDFrags; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mf][f][e] *= rescale[mf][e >> 1];
      }

      if (kGeneral && args.s.dropout) {
        // The row sums above used the undropped P (LSE is of the undropped softmax); O uses the dropped one.
#pragma unroll
        for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
          for (int f = 0; f < kNFrags; ++f) {
            const uint32_t bits = keep_bits_rowmajor(p.dropout, args.s.drop_threshold, t.b, t.h, p.heads,
                                                     warp_first_row + 16 * mf, key0 + 8 * f, lane);
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (!kept_rowmajor(bits, e, lane)) s[mf][f][e] = 0.0f;
          }
      }
      if constexpr (Main::kExpInPv) {
        Main::pv_exp(o, s, softmax, lanes);
        softmax.end_update(rescale);
      } else {
        Main::pv(o, s, lanes);
      }
    }

    T* out_tile = static_cast<T*>(p.out.ptr) + p.out.offset(t.b, t.seq.q_start + t.m0, t.h);
    float* lse_tile = p.lse.ptr ? p.lse.ptr + p.lse.offset(t.b, t.seq.q_start + t.m0, t.h) : nullptr;
    if (kPersistent && prefetched) {
      FwdEpilogue<T, Main>::store_transposed(o, softmax, out_tile, p.out.row_stride, lse_tile, t.valid_rows, d_chunks,
                                             warp_row0, kGeneral && args.s.dropout ? args.s.keep_scale : 1.0f, lane);
    } else {
      // Q's tile is free (no next tile was loaded into it): the staged stores.
      FwdEpilogue<T, Main>::store_staged(o, softmax, sq, out_tile, p.out.row_stride, lse_tile, t.valid_rows, d_chunks,
                                         warp_row0, kGeneral && args.s.dropout ? args.s.keep_scale : 1.0f, lane);
      if constexpr (!kPersistent) break;  // one tile per CTA: the grid is the tile list
    }
  }
  tracer.finish(args, tid);
}

}  // namespace flashattn::detail::cuda::sm80
