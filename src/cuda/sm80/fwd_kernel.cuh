#pragma once

// FlashAttention-2 forward on sm80+ tensor cores. One CTA per (query tile of kBlockM rows, head,
// sequence), flattened into gridDim.x (query tile fastest, so the CTAs sharing a K/V head run together
// and share it through L2; heavier causal tiles first).
//
// Pipeline (one buffer each for K and V, loads always one product ahead, as FlashAttention-2):
//   prologue: cp.async Q, K[first]                                          -> wait, barrier
//   tile n:   cp.async V[n] (*)        | S = Q K[n]^T                        -> wait, barrier
//             cp.async K[n+1]          | mask, online softmax, O += P V[n]   -> wait, barrier (next tile)
// The V load overlaps the QK^T product and the next K load overlaps softmax and PV. (*) At D = 96 and 128
// V's copies are issued between the first k-steps of QK^T instead of before it, and at D = 32, 64, 160 and 192
// (feature-free) the softmax's exp2 run slice by slice inside P V (fwd_mainloop.cuh). Each barrier both
// publishes the landed tile and certifies that every warp finished reading the buffer about to be
// overwritten (K after QK^T, V after PV), so one buffer per operand suffices and shared memory stays at
// Q + K + V (128 KB at head dim 256, within sm80's 163 KB).
//
// Tiles left of / right of the visible band of the CTA's rows are never visited; only tiles that
// straddle a mask boundary (or the sequence end) run the element-wise mask (tile_range.h).
//
// kGeneral = false (args.h, needs_general_fwd): no dropout, softcap or ALiBi, and a positive scale. The
// scores stay raw dot products until the softmax, which folds the scale into exp2's FFMA; dropout and the
// score transform are compiled out, and the tile may be larger (kernel_traits.h).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/philox.h"
#include "common/score.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/dropout.cuh"
#include "cuda/sm80/fwd_epilogue.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/mask.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_range.h"

namespace flashattn::detail::cuda::sm80 {

template <typename T, int kHeadDim, bool kGeneral, bool kPaired>
__global__ void __launch_bounds__(FwdMainloop<T, kHeadDim, kGeneral, kPaired>::kThreads, kPaired ? 2 : 1)
    fwd_kernel(const __grid_constant__ FwdArgs args) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  constexpr int kBlockM = Main::kBlockM, kBlockN = Main::kBlockN, kMFrags = Main::kMFrags;
  constexpr int kNFrags = Main::kNFrags, kDFrags = Main::kDFrags;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + Main::QTile::kElems;
  T* sv = sk + Main::KVTile::kElems;
  const uint32_t sq_addr = ptx::smem_addr(sq), sk_addr = ptx::smem_addr(sk), sv_addr = ptx::smem_addr(sv);

  const FwdProblem& p = args.p;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_row0 = warp * Main::kWarpRows;

  int64_t block = blockIdx.x;
  const int m_block = args.num_m_blocks - 1 - int(block % args.num_m_blocks);
  block /= args.num_m_blocks;
  const int64_t h = block % p.heads;
  const int64_t b = block / p.heads;
  const SeqRange seq = seq_range(p, b);
  const int64_t m0 = int64_t(m_block) * kBlockM;
  // A varlen sequence shorter than max_seqlen_q: the rows past its end belong to the next sequence.
  if (m0 >= seq.sq) return;
  const int valid_rows = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
  const int64_t hk = h / args.s.group;
  const int d_chunks = int(p.head_dim / 8);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);

  const T* q_tile = static_cast<const T*>(p.q.ptr) + p.q.offset(b, seq.q_start + m0, h);
  const T* k_seq = static_cast<const T*>(p.k.ptr) + p.k.offset(b, seq.k_start, hk);
  const T* v_seq = static_cast<const T*>(p.v.ptr) + p.v.offset(b, seq.k_start, hk);

  const Range keys = keys_for_rows(mask, m0, m0 + valid_rows - 1);
  const int n_begin = int(keys.begin / kBlockN);
  const int n_end = keys.end > keys.begin ? int((keys.end + kBlockN - 1) / kBlockN) : n_begin;

  load_rows_async<typename Main::QTile, kBlockM, Main::kThreads>(sq, q_tile, p.q.row_stride, valid_rows, d_chunks, tid);
  if (n_begin < n_end) Main::load_kv(sk, k_seq, p.k.row_stride, n_begin, seq.sk, d_chunks, tid);
  ptx::cp_async_commit();

  float o[kMFrags][kDFrags][4];
#pragma unroll
  for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
    for (int f = 0; f < kDFrags; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mf][f][e] = 0.0f;
  OnlineSoftmax<kMFrags> softmax;
  softmax.init();
  const ScoreFn score = ScoreFn::make(p.score, args.s, b, h);
  const int64_t warp_first_row = m0 + warp_row0;

  ptx::cp_async_wait<0>();
  __syncthreads();
  const typename Main::Lanes lanes(sq_addr, sk_addr, sv_addr, lane, warp_row0);
  typename Main::QFrags q;
  Main::load_q_frags(q, lanes);

  for (int n = n_begin; n < n_end; ++n) {
    if (n > n_begin) {
      ptx::cp_async_wait<0>();  // K[n] landed; the barrier also ends every warp's PV on V[n-1]
      __syncthreads();
    }
    // V[n]'s copies: issued here in one burst, or by qk between its k-steps (kSpreadV, fwd_mainloop.cuh;
    // without it v_copy is never used and compiles away).
    typename Main::KVCopy v_copy = Main::kv_copy(sv, v_seq, p.v.row_stride, n, seq.sk, d_chunks, tid);
    if constexpr (!Main::kSpreadV) {
      Main::load_kv(sv, v_seq, p.v.row_stride, n, seq.sk, d_chunks, tid);
      ptx::cp_async_commit();
    }

    float s[kMFrags][kNFrags][4];
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int f = 0; f < kNFrags; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mf][f][e] = 0.0f;
    Main::qk(s, q, lanes, v_copy);
    if constexpr (Main::kSpreadV) ptx::cp_async_commit();

    ptx::cp_async_wait<0>();  // V[n] landed; the barrier also ends every warp's QK^T on K[n]
    __syncthreads();
    if (n + 1 < n_end) {
      Main::load_kv(sk, k_seq, p.k.row_stride, n + 1, seq.sk, d_chunks, tid);
      ptx::cp_async_commit();
    }

    const int64_t key0 = int64_t(n) * kBlockN;
    if constexpr (kGeneral) logits_rowmajor(s, score, mask, warp_first_row, key0, lane);
    if (!tile_fully_visible(mask, m0, m0 + valid_rows - 1, key0, key0 + kBlockN - 1))
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
          const uint32_t bits = keep_bits_rowmajor(p.dropout, args.s.drop_threshold, b, h, p.heads,
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

  T* out_tile = static_cast<T*>(p.out.ptr) + p.out.offset(b, seq.q_start + m0, h);
  float* lse_tile = p.lse.ptr ? p.lse.ptr + p.lse.offset(b, seq.q_start + m0, h) : nullptr;
  FwdEpilogue<T, Main>::store(o, softmax, sq, out_tile, p.out.row_stride, lse_tile, valid_rows, d_chunks, warp_row0,
                              kGeneral && args.s.dropout ? args.s.keep_scale : 1.0f, lane);
}

template <typename T, int kHeadDim, bool kGeneral, bool kPaired = false>
void run_fwd_instance(FwdArgs args, cudaStream_t stream) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  args.num_m_blocks = int(ceil_div(args.p.seqlen_q, Main::kBlockM));
  const int64_t blocks = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (blocks == 0) return;
  auto kernel = fwd_kernel<T, kHeadDim, kGeneral, kPaired>;
  allow_dynamic_smem(kernel, Main::kSmemBytes, args.p.device.index, "sm80 forward");
  kernel<<<grid_1d(blocks, "sm80 forward"), Main::kThreads, Main::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 forward kernel");
}

// Launches the forward for one (dtype, head-dim bucket); instantiated in fwd_hdim<D>.cu. `paired`:
// the device runs the paired tile where the bucket has one (use_paired_fwd).
template <typename T, int kHeadDim>
void run_fwd(FwdArgs args, bool paired, cudaStream_t stream) {
  if (needs_general_fwd(args.p)) {
    run_fwd_instance<T, kHeadDim, true>(args, stream);
  } else if constexpr (has_paired_fwd(kHeadDim, false)) {
    if (paired)
      run_fwd_instance<T, kHeadDim, false, true>(args, stream);
    else
      run_fwd_instance<T, kHeadDim, false>(args, stream);
  } else {
    run_fwd_instance<T, kHeadDim, false>(args, stream);
  }
}

}  // namespace flashattn::detail::cuda::sm80
