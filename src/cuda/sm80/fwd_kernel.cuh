#pragma once

// FlashAttention-2 forward on sm80+ tensor cores. A CTA computes work tiles of kBlockM query rows of one
// head and sequence, listed so that the CTAs sharing a K/V head run together and share it through L2,
// heavier causal tiles first (tile_order.h): one tile per CTA, or, in the paired D = 256 instance on a call
// whose tiles all cost the same, a grid of as many CTAs as the device holds at once, each walking the
// list with the grid's stride (fwd_persistent).
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
// straddle a mask boundary (or the sequence end) run the element-wise mask (tile_range.h).
//
// kGeneral = false (args.h, needs_general_fwd): no dropout, softcap or ALiBi, and a positive scale. The
// scores stay raw dot products until the softmax, which folds the scale into exp2's FFMA; dropout and the
// score transform are compiled out, and the tile may be larger (kernel_traits.h).

#include <cuda_runtime_api.h>

#include <cstdint>
#if defined(FLASHATTN_SM80_TRACE)
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

#include "common/philox.h"
#include "common/score.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/attn/dropout.cuh"
#include "cuda/sm80/fwd_epilogue.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/softmax.cuh"
#include "cuda/attn/tile_range.h"

namespace flashattn::detail::cuda::sm80 {

// The first loads of a work tile: its Q rows and its first K tile. A CTA of the persistent grid keeps the
// next tile's in shared memory (written by one thread at the start of the current tile) rather than in
// registers: computed where the prefetch is issued, next to the live S and O accumulators, they spilled
// 48-108 bytes at D = 64 and 128.
template <typename T>
struct FwdTileLoads {
  const T* q = nullptr;
  const T* k = nullptr;
  int64_t sk = 0;
  int valid_rows = 0;  // 0: there is no next tile to load
  int n_begin = 0;
  bool has_keys = false;

  // cp.async of Q and K[n_begin], as one commit group.
  template <typename Main>
  __device__ __forceinline__ void issue(const FwdArgs& args, T* sq, T* sk_tile, int tid) const {
    const int d_chunks = int(args.p.head_dim / 8);
    load_rows_async<typename Main::QTile, Main::kBlockM, Main::kThreads>(sq, q, args.p.q.row_stride, valid_rows,
                                                                         d_chunks, tid);
    if (has_keys) Main::load_kv(sk_tile, k, args.p.k.row_stride, n_begin, sk, d_chunks, tid);
    ptx::cp_async_commit();
  }
};

// Where work tile `tile` of the grid's list lies: its query rows, head and sequence, and the key tiles it
// visits. The list's order: tile_order.h (per head, heavier query tiles first; on masked calls, the heavy
// tiles in groups of heads, then the light tiles of every head). The per-head order takes the short path
// of version 12 (a CTA computes its place before it can issue a load: tile_coord's extra division cost
// the persistent D = 256 forward 1.5-2% at S = 512-2k), compiled in for the persistent instance, which runs
// unmasked calls only, and chosen per call elsewhere.
template <typename Main, bool kPerHead = false>
struct FwdTilePlace {
  int64_t b = 0, h = 0;
  SeqRange seq;
  int64_t m0 = 0;      // first query row of the tile in its sequence
  int valid_rows = 0;  // rows of the tile inside the sequence; 0: none (a varlen sequence shorter than max_seqlen_q)
  int n_begin = 0, n_end = 0;

  __device__ __forceinline__ FwdTilePlace(const FwdArgs& args, int tile) {
    const FwdProblem& p = args.p;
    const TileCoord c = kPerHead || args.order.per_head()
                            ? TileCoord{args.num_m_blocks - 1 - tile % args.num_m_blocks, tile / args.num_m_blocks}
                            : tile_coord(tile, args.order);
    const int m_block = c.m_block;
    const int head_seq = c.head_seq, heads = int(p.heads);
    h = head_seq % heads;
    b = head_seq / heads;
    seq = seq_range(p, b);
    m0 = int64_t(m_block) * Main::kBlockM;
    if (m0 >= seq.sq) return;
    valid_rows = int(seq.sq - m0 < Main::kBlockM ? seq.sq - m0 : Main::kBlockM);
    const Range keys = keys_for_rows(make_mask(p.score, seq.sq, seq.sk), m0, m0 + valid_rows - 1);
    n_begin = int(keys.begin / Main::kBlockN);
    n_end = keys.end > keys.begin ? int((keys.end + Main::kBlockN - 1) / Main::kBlockN) : n_begin;
  }

  __device__ __forceinline__ int64_t hk(const FwdArgs& args) const { return h / args.s.group; }
  template <typename T>
  __device__ __forceinline__ const T* q_rows(const FwdProblem& p) const {
    return static_cast<const T*>(p.q.ptr) + p.q.offset(b, seq.q_start + m0, h);
  }
  template <typename T>
  __device__ __forceinline__ const T* k_rows(const FwdArgs& args) const {
    return static_cast<const T*>(args.p.k.ptr) + args.p.k.offset(b, seq.k_start, hk(args));
  }
  template <typename T>
  __device__ __forceinline__ const T* v_rows(const FwdArgs& args) const {
    return static_cast<const T*>(args.p.v.ptr) + args.p.v.offset(b, seq.k_start, hk(args));
  }

  // What the cp.async of the tile's Q rows and first K tile need (FwdTileLoads).
  template <typename T>
  __device__ __forceinline__ FwdTileLoads<T> loads(const FwdArgs& args) const {
    return FwdTileLoads<T>{q_rows<T>(args.p), k_rows<T>(args), seq.sk, valid_rows, n_begin, n_begin < n_end};
  }
};

// Whether a tile has a persistent instance (the grid of resident CTAs, the next tile's loads issued in
// the last key tile), run on calls whose tiles all cost the same: the paired tile at D = 256 only.
// Measured on the H200 (interleaved with SDPA flash, bench/NOTES.md, sm80 version 12): D = 256 +2.7-3.6%
// at S = 512 and +1.0-1.7% at 1k over the same kernel with one tile per CTA; D = 160 and 224 (paired)
// 0.98-0.99x, D = 192 0.98-1.02x; D = 128 (128 x 64, also two CTAs per SM) 3.7-3.9% slower. Every other
// instance runs one tile per CTA, with the code of version 11. D = 64 could not have it anyway: beside
// its S tile of 128 keys the prefetch's copies spill 24-32 bytes on sm_90a.
template <int kHeadDim, bool kPaired>
constexpr bool fwd_persistent() {
  return kPaired && kHeadDim == 256;
}

// kPersistent: the instance that walks the tile list with a grid of resident CTAs (fwd_persistent); the
// other runs one tile per CTA.
template <typename T, int kHeadDim, bool kGeneral, bool kPaired, bool kPersistent>
__global__ void __launch_bounds__(FwdMainloop<T, kHeadDim, kGeneral, kPaired>::kThreads, kPaired ? 2 : 1)
    fwd_kernel(const __grid_constant__ FwdArgs args) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  using Place = FwdTilePlace<Main, kPersistent>;
  static_assert(!kPersistent || fwd_persistent<kHeadDim, kPaired>(), "no persistent instance for this tile");
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
#if defined(FLASHATTN_SM80_TRACE)
  const uint64_t trace_start = ptx::global_ns();
  int trace_m = 0;
#endif

  // A grid smaller than the tile list (persistent, run_fwd_instance) walks it with a stride of the grid;
  // each tile's Q and first K tile are then loaded during the previous tile's last softmax, P V and
  // epilogue (`prefetched`) instead of after its epilogue, where nothing else would hide their latency.
  // The next tile's loads, written by thread 0 at the start of a tile into slot `parity` and read by every
  // thread in its last key tile; the slot is written again two tiles later, after barriers that order it
  // after every thread's read.
  __shared__ FwdTileLoads<T> next_loads[kPersistent ? 2 : 1];
  bool prefetched = false;
  int parity = 0;
  for (int tile = int(blockIdx.x); tile < args.num_tiles; tile += int(gridDim.x)) {
    const Place t(args, tile);
    if (t.valid_rows == 0) continue;
    if (!prefetched) {
      // A previous tile of this CTA that loaded nothing ahead (no keys: seqlen_k = 0) staged its output in
      // Q's tile: every warp must be done reading it back before Q's rows are loaded over it.
      if (kPersistent && tile != int(blockIdx.x)) __syncthreads();
      t.template loads<T>(args).template issue<Main>(args, sq, sk, tid);
    }
    prefetched = false;
    parity ^= 1;
#if defined(FLASHATTN_SM80_TRACE)
    trace_m = int(t.m0 / Main::kBlockM);
#endif
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
      if (int64_t(tile) + gridDim.x < args.num_tiles) next = Place(args, tile + int(gridDim.x)).template loads<T>(args);
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
      if constexpr (!Main::kSpreadV) {
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
      Main::qk(s, q, lanes, v_copy);
      if constexpr (Main::kSpreadV) ptx::cp_async_commit();

      ptx::cp_async_wait<0>();  // V[n] landed; the barrier also ends every warp's QK^T on K[n] and reads of Q
      __syncthreads();
      if (n + 1 < t.n_end) {
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
      // Q's tile is free (no next tile was loaded into it): the staged stores, as version 11.
      FwdEpilogue<T, Main>::store_staged(o, softmax, sq, out_tile, p.out.row_stride, lse_tile, t.valid_rows, d_chunks,
                                         warp_row0, kGeneral && args.s.dropout ? args.s.keep_scale : 1.0f, lane);
      if constexpr (!kPersistent) break;  // one tile per CTA: the grid is the tile list
    }
  }
#if defined(FLASHATTN_SM80_TRACE)
  __syncthreads();
  if (tid == 0) args.trace[blockIdx.x] = FwdCtaTrace{ptx::sm_id(), trace_m, trace_start, ptx::global_ns()};
#endif
}

// The grid of a forward with `tiles` work tiles: one CTA per tile, or, for a problem whose tiles all cost
// the same (no mask, no varlen: FwdArgs::persistent), as many CTAs as fit on the device at once, each
// walking the list (fwd_kernel). Causal and windowed tiles differ in cost and keep the hardware's dynamic
// scheduling.
template <typename Kernel>
int64_t fwd_grid(Kernel kernel, int threads, int smem_bytes, int64_t tiles, bool persistent, int device) {
  if (!persistent) return tiles;
  // CTAs of the kernel the device holds at once
  const int64_t resident = once_per_kernel<int64_t>(reinterpret_cast<const void*>(kernel), device, [&] {
    int per_sm = 0, sms = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return int64_t(per_sm > 0 ? per_sm : 1) * sms;
  });
  return tiles < resident ? tiles : resident;
}

#if defined(FLASHATTN_SM80_TRACE)
// Appends the CTAs of one forward to the CSV file named by FLASHATTN_SM80_TRACE_FILE (call, CTA, SM, start
// and end in ns from the call's first start, query tiles per head, tiles, causal, the CTA's query tile) and
// frees the buffer. Calls are numbered per process.
inline void write_fwd_trace(const FwdArgs& args, int64_t blocks, cudaStream_t stream) {
  static int call = 0;
  std::vector<FwdCtaTrace> trace(static_cast<size_t>(blocks));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  FA_CUDA_CHECK(cudaMemcpy(trace.data(), args.trace, trace.size() * sizeof(FwdCtaTrace), cudaMemcpyDeviceToHost));
  FA_CUDA_CHECK(cudaFree(args.trace));
  const char* path = std::getenv("FLASHATTN_SM80_TRACE_FILE");
  std::FILE* f = path ? std::fopen(path, "a") : nullptr;
  if (f == nullptr) return;
  uint64_t t0 = ~uint64_t(0);
  for (const FwdCtaTrace& t : trace) t0 = t.start_ns < t0 ? t.start_ns : t0;
  for (size_t i = 0; i < trace.size(); ++i)
    std::fprintf(f, "%d,%zu,%u,%llu,%llu,%d,%d,%d,%d\n", call, i, trace[i].smid,
                 static_cast<unsigned long long>(trace[i].start_ns - t0),
                 static_cast<unsigned long long>(trace[i].end_ns - t0), args.num_m_blocks, args.num_tiles,
                 args.p.score.window_right >= 0 ? 1 : 0, trace[i].m_block);
  std::fclose(f);
  ++call;
}
#endif

template <typename T, int kHeadDim, bool kGeneral, bool kPaired = false, bool kPersistent = false>
void run_fwd_instance(FwdArgs args, cudaStream_t stream) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  args.num_m_blocks = int(ceil_div(args.p.seqlen_q, Main::kBlockM));
  const int64_t tiles = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (tiles == 0) return;
  args.num_tiles = int(tiles);  // supports_fwd keeps it within the grid limit, 2^31 - 1
  auto kernel = fwd_kernel<T, kHeadDim, kGeneral, kPaired, kPersistent>;
  // (the static shared memory is fwd_kernel's next_loads)
  allow_dynamic_smem(kernel, Main::kSmemBytes, args.p.device.index, "sm80 forward",
                     kPersistent ? 2 * sizeof(FwdTileLoads<T>) : 0);
  const int64_t blocks = fwd_grid(kernel, Main::kThreads, Main::kSmemBytes, tiles, kPersistent, args.p.device.index);
#if defined(FLASHATTN_SM80_TRACE)
  FA_CUDA_CHECK(cudaMalloc(&args.trace, blocks * sizeof(FwdCtaTrace)));
#endif
  kernel<<<grid_1d(blocks, "sm80 forward"), Main::kThreads, Main::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 forward kernel");
#if defined(FLASHATTN_SM80_TRACE)
  write_fwd_trace(args, blocks, stream);
#endif
}

// Launches the forward for one (dtype, head-dim bucket); instantiated in fwd_hdim<D>.cu. `paired`:
// the device runs the paired tile where the bucket has one (use_paired_fwd). The paired tile of bucket
// 256 has two instances: the persistent one for calls whose tiles all cost the same (args.persistent),
// and one tile per CTA for the others, with the code of version 11: with one kernel for both, causal
// calls measured 2.2-2.9% slower at S = 512-1k (bench/NOTES.md, sm80 version 12).
template <typename T, int kHeadDim>
void run_fwd(FwdArgs args, bool paired, cudaStream_t stream) {
  if (args.general) {
    run_fwd_instance<T, kHeadDim, true>(args, stream);
  } else if constexpr (has_paired_fwd(kHeadDim, false)) {
    if (!paired)
      run_fwd_instance<T, kHeadDim, false>(args, stream);
    else if (fwd_persistent<kHeadDim, true>() && args.persistent)
      run_fwd_instance<T, kHeadDim, false, true, fwd_persistent<kHeadDim, true>()>(args, stream);
    else
      run_fwd_instance<T, kHeadDim, false, true>(args, stream);
  } else {
    run_fwd_instance<T, kHeadDim, false>(args, stream);
  }
}

}  // namespace flashattn::detail::cuda::sm80
