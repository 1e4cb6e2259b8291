#pragma once

// The forward's tile scheduler: which work tiles of the grid's list a CTA runs, where each lies, and the
// grid that runs them. The list is ordered by attn/tile_order.h (per head, heavier query tiles first; on
// masked calls the heavy tiles in groups of heads, then the light tiles of every head: longest first).
//  * One tile per CTA (kPersistent = false): the grid is the list, and the hardware hands its CTAs to SMs
//    in list order as slots free.
//  * Persistent (kPersistent = true; fwd_persistent says which instance has it): a grid of as many CTAs
//    as the device holds at once, each walking the list with the grid's stride, for calls whose tiles all
//    cost the same (no mask, no varlen: FwdArgs::persistent). Each tile's Q and first K tile are then
//    loaded during the previous tile's last key tile (FwdTileLoads) instead of at the CTA's start.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/score.h"
#include "cuda/attn/tile_order.h"
#include "cuda/attn/tile_range.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/fwd_mainloop.cuh"

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
// tiles in groups of heads, then the light tiles of every head). The per-head order takes a short path
// (a CTA computes its place before it can issue a load: tile_coord's extra division cost the persistent
// D = 256 forward 1.5-2% at S = 512-2k), compiled in for the persistent instance, which runs unmasked
// calls only, and chosen per call elsewhere.
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

  // Paged K/V (FwdProblem::paged, attn/paged_keys.h): the sequence's pages, and K's and V's bases at the kv
  // head (a key's row is added per tile or per row, FwdMainloop::load_kv_paged).
  __device__ __forceinline__ PagedKeyRows pages(const FwdArgs& args) const {
    return paged_key_rows(args.p.paged, args.page, b);
  }
  template <typename T>
  __device__ __forceinline__ const T* k_head(const FwdArgs& args) const {
    return static_cast<const T*>(args.p.k.ptr) + hk(args) * args.p.k.head_stride;
  }
  template <typename T>
  __device__ __forceinline__ const T* v_head(const FwdArgs& args) const {
    return static_cast<const T*>(args.p.v.ptr) + hk(args) * args.p.v.head_stride;
  }

  // What the cp.async of the tile's Q rows and first K tile need (FwdTileLoads).
  template <typename T>
  __device__ __forceinline__ FwdTileLoads<T> loads(const FwdArgs& args) const {
    return FwdTileLoads<T>{q_rows<T>(args.p), k_rows<T>(args), seq.sk, valid_rows, n_begin, n_begin < n_end};
  }
};

// Whether a tile has a persistent instance (the grid of resident CTAs, the next tile's loads issued in
// the last key tile), run on calls whose tiles all cost the same: the paired tile at D = 256 only.
// Measured on the H200 (interleaved with SDPA flash, bench/NOTES.md): D = 256 +2.7-3.6% at S = 512 and
// +1.0-1.7% at 1k over the same kernel with one tile per CTA; D = 160 and 224 (paired) 0.98-0.99x,
// D = 192 0.98-1.02x; D = 128 (128 x 64, also two CTAs per SM) 3.7-3.9% slower. Every other instance
// runs one tile per CTA. D = 64 could not have it anyway: beside its S tile of 128 keys the prefetch's
// copies spill 24-32 bytes on sm_90a.
template <int kHeadDim, bool kPaired>
constexpr bool fwd_persistent() {
  return kPaired && kHeadDim == 256;
}

template <bool kPersistent>
struct FwdTileScheduler {
  // The CTA's first work tile, the one after `tile`, and whether there is one within `num_tiles`.
  __device__ __forceinline__ static int first() { return int(blockIdx.x); }
  __device__ __forceinline__ static int next(int tile) { return tile + int(gridDim.x); }
  __device__ __forceinline__ static bool has_next(int tile, int num_tiles) {
    return int64_t(tile) + gridDim.x < num_tiles;
  }

  // The grid of `kernel` for `tiles` work tiles: the list, or at most the CTAs the device holds at once.
  template <typename Kernel>
  static int64_t grid(Kernel kernel, int threads, int smem_bytes, int64_t tiles, int device) {
    if constexpr (!kPersistent) {
      return tiles;
    } else {
      // CTAs of the kernel the device holds at once
      const int64_t resident = once_per_kernel<int64_t>(reinterpret_cast<const void*>(kernel), device, [&] {
        int per_sm = 0, sms = 0;
        FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
        FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        return int64_t(per_sm > 0 ? per_sm : 1) * sms;
      });
      return tiles < resident ? tiles : resident;
    }
  }
};

}  // namespace flashattn::detail::cuda::sm80
