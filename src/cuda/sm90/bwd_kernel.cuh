#pragma once

// The Hopper backward's main kernel (cuda_sm90): FlashAttention-2's key-tile partition (one CTA per
// (key tile, kv head, sequence), looping over the query heads of its GQA group and the query tiles that
// see its keys, dK and dV in registers for the whole loop, dQ added into dq_accum with fp32 reductions)
// on Hopper's machinery: TMA loads through an mbarrier ring, a producer warp, wgmma products. The light
// kernels around it (D = rowsum(dO * O) with the dq_accum clear, and dQ's conversion) are the other CUDA
// backward's (attn/bwd_prepost.cuh, launched by launch_bwd.cu). Layout and budgets: bwd_tile.h.
// Roles:
//   warpgroup 0, the producer (setmaxnreg down): its first warp loads K and V once (TMA, kv_full), then per
//     step (query head h, query tile m0) Q and dO by TMA into the ring's next stage, while its 32 lanes
//     copy the step's LSE (times log2 e) and D rows into the stage with ordinary loads and stores; the
//     stage's `full` barrier completes with the TMA bytes and the 32 lanes' arrivals. Its second warp, the
//     dQ writer, adds each consumer warpgroup's dQ of a step from shared memory into dq_accum with one
//     bulk reduction (16 KB; sm90/dq_tiles.h), so the consumers issue no atomics.
//   warpgroups 1 and 2, the consumers: warpgroup c owns keys [64 c, 64 c + 64) of the tile. Per step:
//     S^T = K Q^T and dP^T = V dO^T (wgmma, both operands in shared memory), P^T = exp2(S^T scale log2 e -
//     LSE log2 e) with the mask, dS^T = P^T (dP^T - D) (in registers, sm80's transposed element
//     code; the softmax scale is left out of dS, one multiply an element less per step: dK takes it in the
//     epilogue and dQ in the convert kernel, BwdArgs::dq_scale; the softcap/ALiBi instance keeps it inside
//     dS, in its logit derivative); then dV += P^T dO (wgmma, P^T from registers), dS^T into shared
//     memory, dQ = dS K (wgmma, both operands MN-major in shared memory; bwd_tile.h says which warpgroup
//     takes which part) and dK += dS^T Q (dS^T from registers), in that order, so that dQ is done while
//     dK still runs: the warpgroup copies dQ into its shared dQ buffer (once the writer has read the
//     previous step's) during dK, hands it to the writer (named barriers), and arrives on the stage's
//     `empty` after dK.
//   epilogue: dK and dV rounded to T into the K and V tiles (after both warpgroups' last dQ read K), then
//     16-byte stores of each warpgroup's rows.
//
// Ordering facts relied on (as in the forward): TMA's writes complete on the mbarrier; the producer lanes'
// ordinary stores of LSE and D come before their arrival (release) and the consumers' wait (acquire);
// consumer threads arrive on `empty` after wgmma.wait_group 0, so the stage's next loads cannot overtake a
// read; dS^T written with ordinary stores is fenced into the async proxy (fence.proxy.async) before the
// barrier that precedes its wgmma reads.

#include <cuda.h>

#include <cstdint>

#include "common/score.h"
#include "cuda/attn/bwd_args.h"
#include "cuda/attn/dq_accum.h"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/score_args.h"
#include "cuda/attn/tile_range.h"
#include "cuda/common/async_ptx.cuh"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/smem_layout.h"
#include "cuda/sm80/tile_copy.cuh"
#include "cuda/sm90/bwd_args.h"
#include "cuda/sm90/bwd_tile.h"
#include "cuda/sm90/dq_tiles.h"
#include "cuda/sm90/pipeline.h"

namespace flashattn::detail::cuda::sm90 {

// A consumer warpgroup's products. Operands: K and V (block_n x head dim, K-major for S^T and dP^T,
// MN-major as dQ's B), the step's Q and dO (block_m x head dim: K-major as B of S^T and dP^T, MN-major as
// B of dK and dV), the dS^T tile (block_n keys x block_m queries: MN-major as dQ's A).
template <typename T, int kHeadDim>
struct BwdConsumer {
  static constexpr Sm90BwdTile kTile = bwd_tile(kHeadDim);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n;
  static constexpr int kSFrags = kBlockM / 8;             // n8 groups of S^T and dP^T (queries)
  static constexpr int kDFrags = kHeadDim / 8;            // n8 groups of dK and dV (head dims)
  static constexpr int kDqFrags = kTile.dq_cols() / 8;    // n8 groups of this warpgroup's dQ slice
  static constexpr int kDimSteps = kHeadDim / 16;         // k16 steps of S^T and dP^T
  static constexpr int kRowSteps = kBlockM / 16;          // k16 steps of dK and dV (queries)
  static constexpr int kKeySteps = kTile.dq_keys() / 16;  // k16 steps of dQ (keys)
  static_assert(kSFrags == 8 && kDqFrags == 8, "S^T, dP^T and dQ are m64n64k16 products");
  static_assert(kDFrags == 8 || kDFrags == 16, "dK and dV are m64n64k16 or m64n128k16 products");

  template <int kN>
  __device__ __forceinline__ static void zero(float (&acc)[kN][4]) {
#pragma unroll
    for (int j = 0; j < kN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  }

  // Issues acc = A B^T over the head dim, A the 64 rows at row0 of a block_n-row tile (K or V), B the
  // step's tile (Q or dO), both K-major; one commit group. The caller zeroes acc and fences.
  __device__ __forceinline__ static void keys_by_queries(float (&acc)[kSFrags][4], uint32_t a_tile, int row0,
                                                         uint32_t b_tile) {
    const uint64_t a_desc = wgmma::smem_desc(a_tile + kmajor_start(kBlockN, row0, 0), 16, kSwizzleAtomBytes);
    const uint64_t b_desc = wgmma::smem_desc(b_tile, 16, kSwizzleAtomBytes);
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk)
      wgmma::mma_ss_m64n64k16<T>(
          acc, wgmma::desc_advance(a_desc, kmajor_start(kBlockN, row0, kk) - kmajor_start(kBlockN, row0, 0)),
          wgmma::desc_advance(b_desc, kmajor_start(kBlockM, 0, kk)));
    wgmma::commit_group();
  }

  // Issues S^T = K Q^T, then dP^T = V dO^T (two commit groups, in that order) for the warpgroup's 64 keys.
  // Both accumulators are zeroed, and pinned as zeroed (fence_operands), before either product is issued:
  // otherwise the compiler sinks the second's zeroing past the first product and copies the zeros from
  // registers that product is writing, and ptxas serialises the two (C7517).
  __device__ __forceinline__ static void scores_issue(float (&s)[kSFrags][4], float (&dp)[kSFrags][4], uint32_t k_tile,
                                                      uint32_t v_tile, int row0, uint32_t q_tile, uint32_t do_tile) {
    zero(s);
    zero(dp);
    wgmma::fence_operands(s);
    wgmma::fence_operands(dp);
    wgmma::fence();
    keys_by_queries(s, k_tile, row0, q_tile);
    keys_by_queries(dp, v_tile, row0, do_tile);
  }

  // Issues acc += X Y over the step's queries, X (64 keys x block_m queries) from registers as packed A
  // fragments, Y the step's tile (dO or Q) read MN-major. No fence or commit: the caller's.
  __device__ __forceinline__ static void keys_by_dims(float (&acc)[kDFrags][4], const uint32_t (&x)[kRowSteps][4],
                                                      uint32_t y_tile) {
    const uint64_t desc = wgmma::smem_desc(y_tile, mnmajor_leading(kBlockM), kSwizzleAtomBytes);
#pragma unroll
    for (int kk = 0; kk < kRowSteps; ++kk)
      wgmma::mma_rs_m64k16_tn<T, kDFrags>(acc, x[kk], wgmma::desc_advance(desc, mnmajor_start(kk)));
  }

  // Issues this warpgroup's dQ slice = dS K (queries x its dQ columns, over its dQ keys: bwd_tile.h), dS
  // read from the dS^T tile and K from the K tile, both MN-major; one commit group.
  __device__ __forceinline__ static void dq_issue(float (&acc)[kDqFrags][4], uint32_t ds_tile, uint32_t k_tile,
                                                  int consumer) {
    zero(acc);
    const int key0 = kTile.dq_split_columns() ? 0 : kWgmmaRows * consumer;
    const int panel = kTile.dq_split_columns() ? consumer : 0;
    const uint64_t a_desc =
        wgmma::smem_desc(ds_tile + uint32_t(key0) * kPanelRowBytes, mnmajor_leading(kBlockN), kSwizzleAtomBytes);
    const uint64_t b_desc = wgmma::smem_desc(k_tile + uint32_t(panel * kBlockN + key0) * kPanelRowBytes,
                                             mnmajor_leading(kBlockN), kSwizzleAtomBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk)
      wgmma::mma_ss_m64n64k16_tt<T>(acc, wgmma::desc_advance(a_desc, mnmajor_start(kk)),
                                    wgmma::desc_advance(b_desc, mnmajor_start(kk)));
    wgmma::commit_group();
  }

  // The accumulator (64 keys x block_m queries, fp32) rounded to T as the A fragments of the products
  // over queries: two adjacent n8 groups are one k16 step (cuda/common/wgmma.cuh).
  __device__ __forceinline__ static void pack(uint32_t (&x)[kRowSteps][4], const float (&acc)[kSFrags][4]) {
#pragma unroll
    for (int kk = 0; kk < kRowSteps; ++kk) {
      x[kk][0] = ptx::pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
      x[kk][1] = ptx::pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
      x[kk][2] = ptx::pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
      x[kk][3] = ptx::pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
    }
  }

  // Stores packed A fragments of this warp's 16 keys (tile rows row0 + g, row0 + g + 8) into the dS^T tile:
  // element (key, query) at its (row, column); the 4-byte stores of sm80's store_acc (conflict-free).
  __device__ __forceinline__ static void store_packed(T* tile, const uint32_t (&x)[kRowSteps][4], int row0, int lane) {
    using DsTile = sm80::SmemTile<kBlockN, kBlockM>;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < kRowSteps; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = row0 + g + 8 * (r & 1), col = 16 * kk + 8 * (r >> 1) + 2 * t;
        *reinterpret_cast<uint32_t*>(tile + DsTile::offset(row, col)) = x[kk][r];
      }
  }
};

// The mbarriers after the tiles (bwd_tile.h, barrier_offset): kv_full, then full and empty per stage.
template <int kStages>
struct BwdBarriers {
  uint32_t kv_full;
  __device__ __forceinline__ uint32_t full(int s) const { return kv_full + 8u * uint32_t(1 + s); }
  __device__ __forceinline__ uint32_t empty(int s) const { return kv_full + 8u * uint32_t(1 + kStages + s); }
};

// Named barriers (0 is __syncthreads): the dS^T tile's (both consumer warpgroups, or one per warpgroup
// where each reads only its own rows), the epilogue's (both), each warpgroup's store barrier, and per
// consumer warpgroup its dQ buffer's `full` (the warpgroup arrives, the writer warp waits) and `empty`
// (the reverse), 128 + 32 threads each.
inline constexpr uint32_t kBwdDsBarrier = 1, kBwdEpilogueBarrier = 3, kBwdStoreBarrier = 4, kBwdDqFullBarrier = 6,
                          kBwdDqEmptyBarrier = 8;
inline constexpr uint32_t kBwdDqBarrierThreads = kWarpgroupThreads + 32;

// How the main kernel produces dQ: not at all (the deterministic mode: sm80's dQ kernel computes it afterwards,
// without atomics), by each consumer thread's fp32 reductions into dq_accum's blocked layout
// (attn/dq_accum.h; the first version, kept as the A/B arm of the next), or through the shared dQ buffers
// and the writer warp's bulk reductions into dq_accum's tiles (sm90/dq_tiles.h).
enum class BwdDq { none, reductions, bulk };

// kGeneral: the instance for calls with softcap or ALiBi (attn/score_args.h).
template <typename T, int kHeadDim, bool kGeneral, BwdDq kDqMode>
__global__ void __launch_bounds__(bwd_tile(kHeadDim).threads(), 1) bwd_kernel(const __grid_constant__ BwdArgs args) {
  constexpr Sm90BwdTile kTile = bwd_tile(kHeadDim, kGeneral);
  constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kStages = kTile.stages;
  static_assert(kTile.registers_fit(), "setmaxnreg budgets exceed the register file");
  static_assert(kTile.consumer_warpgroups() == 2, "two consumer warpgroups of 64 keys each");
  static_assert(kBlockM == kDqTileRows && kTile.dq_cols() == kDqPanelCols, "a step's dQ slice is one dq_accum block");
  constexpr bool kDq = kDqMode != BwdDq::none, kBulk = kDqMode == BwdDq::bulk;
  using Consumer = BwdConsumer<T, kHeadDim>;
  using KVTile = sm80::SmemTile<kBlockN, kHeadDim>;  // the layout of fwd_tile.h, for the epilogue
  const attn::BwdArgs& a = args.base;
  const BwdProblem& p = a.p;

  extern __shared__ unsigned char smem_raw[];
  // Every tile starts on a 1024-byte boundary (the swizzle atom; smem_bytes() includes the slack).
  const uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const uint32_t pad = (kSwizzleAtomBytes - raw_addr % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  unsigned char* smem = smem_raw + pad;
  const uint32_t base = raw_addr + pad;

  // (key tile, kv head, sequence) of this CTA; key tiles of a head consecutive, the lowest (under a causal
  // mask the most visited) first. The deterministic mode numbers CTAs in the order they start (a ticket
  // drawn from a counter) instead of by blockIdx: a CTA then waits only for CTAs that have started. Where
  // a key tile's first visible query row grows with the keys (a causal mask or a right window), it takes
  // the key tiles highest first and orders the reductions the same way (`descending`): CTA n starts near
  // query tile 2n, so the higher key tiles reach each query tile first and nobody waits for a CTA behind.
  int64_t block = blockIdx.x;
  const bool ordered = kBulk && args.dq_order != nullptr;
  if (ordered) {
    volatile int* ticket = reinterpret_cast<volatile int*>(smem + kTile.ticket_offset());
    if (threadIdx.x == 0)
      *ticket = atomicAdd(
          args.dq_order + dq_order_ticket(a.p.cu_seqlens_q != nullptr, a.p.batch, a.p.seqlen_q, a.p.total_q, a.p.heads),
          1);
    __syncthreads();
    block = *ticket;
  }
  const bool descending = ordered && p.score.window_right >= 0;
  const int n_block = descending ? a.num_n_blocks - 1 - int(block % a.num_n_blocks) : int(block % a.num_n_blocks);
  block /= a.num_n_blocks;
  const int hk = int(block % p.heads_k);
  const int64_t b = block / p.heads_k;
  const SeqRange seq = seq_range(p, b);
  const int64_t n0 = int64_t(n_block) * kBlockN;
  if (n0 >= seq.sk) return;  // a varlen sequence shorter than max_seqlen_k; uniform over the CTA
  const int valid_keys = int(seq.sk - n0 < kBlockN ? seq.sk - n0 : kBlockN);
  const Mask mask = make_mask(p.score, seq.sq, seq.sk);
  const attn::Range m_tiles = attn::query_tiles_for_key_tile(mask, n_block, kBlockN, kBlockM);
  const int m_begin = int(m_tiles.begin);
  const int m_count = int(m_tiles.end - m_tiles.begin);
  const int group = a.s.group;
  const int steps = group * m_count;
  const auto step_head = [&](int i) { return hk * group + i / m_count; };
  const auto step_m0 = [&](int i) { return int64_t(m_begin + i % m_count) * kBlockM; };
  // Dense maps index (row in the sequence, head, sequence); varlen maps (packed row, head, 0).
  const int map_batch = p.cu_seqlens_q != nullptr ? 0 : int(b);

  const BwdBarriers<kStages> bars{base + uint32_t(kTile.barrier_offset())};
  constexpr uint32_t kConsumerThreads = uint32_t(kTile.consumer_warpgroups() * kWarpgroupThreads);
  const int warpgroup = int(threadIdx.x) / kWarpgroupThreads;

  if (threadIdx.x == 0) {
    async::mbarrier_init(bars.kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      async::mbarrier_init(bars.full(s), 32);  // the producer warp's lanes (LSE and D rows; lane 0 also the TMA)
      async::mbarrier_init(bars.empty(s), kConsumerThreads);
    }
    async::fence_mbarrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    async::setmaxnreg_dec<kTile.producer_regs>();
    if (steps == 0) return;
    if constexpr (kBulk) {
      if (threadIdx.x / 32 == 1) {
        // The dQ writer: per step, each consumer warpgroup's dQ block (full) into dq_accum, then the
        // buffers back to the warpgroups (empty) once the reductions have read them.
        // Deterministic mode (`ordered`): the blocks of a (query tile, head) take their CTAs' reductions in key-tile
        // order (ascending, or descending, as the tickets go), so every element's fp32 sum has the same order in every
        // run. Under the masks (causal, window: bands) the key tiles that see a query tile are consecutive, so a CTA's
        // predecessors there are the run of key tiles next to its own, on the side that goes first, that also see it
        // (counted by the warp with the function the CTAs take their own query tiles from); the CTA waits until the
        // tile's counter has reached that many, adds, waits for its reductions to complete, and advances the counter.
        // The CTAs it waits for have lower tickets: they have started and need nothing from it.
        const int64_t first_tile = dq_first_tile(p.cu_seqlens_q != nullptr, b, p.seqlen_q, seq.q_start);
        const int wlane = int(threadIdx.x) - 32;
        const int side = descending ? int((seq.sk + kBlockN - 1) / kBlockN) - 1 - n_block : n_block;
        const auto predecessors = [&](int m_tile) {
          for (int done = 0; done < side; done += 32) {
            const int k = done + wlane;  // this lane's key tile: k + 1 tiles away on the first side
            const int n = descending ? n_block + k + 1 : n_block - k - 1;
            bool visits = false;
            if (k < side) {
              const attn::Range r = attn::query_tiles_for_key_tile(mask, n, kBlockN, kBlockM);
              visits = r.begin <= m_tile && m_tile < r.end;
            }
            const uint32_t gaps = __ballot_sync(0xffffffffu, !visits);
            if (gaps != 0) return done + __ffs(int(gaps)) - 1;
          }
          return side;
        };
        for (int c = 0; c < 2; ++c)
          async::named_barrier_arrive(true, kBwdDqEmptyBarrier + uint32_t(c), kBwdDqBarrierThreads);
        for (int i = 0; i < steps; ++i) {
          const int m_tile = m_begin + i % m_count;
          const int64_t tile = first_tile + m_tile;
          int* counter = ordered ? args.dq_order + tile * p.heads + step_head(i) : nullptr;
          if (ordered) {
            const int before = predecessors(m_tile);
            if (threadIdx.x == 32) {
              while (ptx::ld_acquire_gpu(counter) < before) __nanosleep(64);
              async::fence_proxy_async_global();
            }
            __syncwarp();
          }
          for (int c = 0; c < 2; ++c) {
            async::named_barrier_sync(kBwdDqFullBarrier + uint32_t(c), kBwdDqBarrierThreads);
            if (threadIdx.x == 32) {
              const int panel = kTile.dq_split_columns() ? c : 0;
              async::bulk_reduce_add_f32(a.dq_accum + dq_block_offset(tile, step_head(i), panel, p.heads, kHeadDim),
                                         base + uint32_t(kTile.dq_offset(c)), uint32_t(kTile.dq_bytes()));
              async::bulk_commit_group();
              // One panel: both warpgroups add into the same block, the first completing before the second.
              if (ordered && !kTile.dq_split_columns() && c == 0) async::bulk_wait_group<0>();
            }
          }
          if (threadIdx.x == 32) {
            if (ordered) {
              async::bulk_wait_group<0>();
              async::fence_proxy_async_global();
              ptx::red_release_add_gpu(counter, 1);
            } else {
              async::bulk_wait_group_read<0>();
            }
          }
          __syncwarp();
          if (i + 1 < steps)
            for (int c = 0; c < 2; ++c)
              async::named_barrier_arrive(true, kBwdDqEmptyBarrier + uint32_t(c), kBwdDqBarrierThreads);
        }
        if (threadIdx.x == 32) async::bulk_wait_group<0>();
        return;
      }
    }
    if (threadIdx.x >= 32) return;
    const int lane = int(threadIdx.x);
    if (lane == 0) {
      async::prefetch_tensormap(&args.q_map);
      async::prefetch_tensormap(&args.do_map);
      async::mbarrier_arrive_expect_tx(bars.kv_full, uint32_t(2 * kTile.kv_bytes()));
      const int k_row = int(seq.k_start + n0);
#pragma unroll
      for (int pnl = 0; pnl < kTile.panels(); ++pnl) {
        const uint32_t off = uint32_t(pnl * kBlockN) * kPanelRowBytes;
        async::tma_load_4d(base + uint32_t(kTile.k_offset()) + off, &args.k_map, bars.kv_full, pnl * int(kPanelCols),
                           k_row, hk, map_batch);
        async::tma_load_4d(base + uint32_t(kTile.v_offset()) + off, &args.v_map, bars.kv_full, pnl * int(kPanelCols),
                           k_row, hk, map_batch);
      }
    }
    PipelineState<kStages> st;
    for (int i = 0; i < steps; ++i) {
      const int h = step_head(i);
      const int64_t m0 = step_m0(i);
      async::mbarrier_wait(bars.empty(st.stage), st.empty_parity());
      if (lane == 0) {
        async::mbarrier_expect_tx(bars.full(st.stage), uint32_t(2 * kTile.q_bytes()));
        const int q_row = int(seq.q_start + m0);
#pragma unroll
        for (int pnl = 0; pnl < kTile.panels(); ++pnl) {
          const uint32_t off = uint32_t(pnl * kBlockM) * kPanelRowBytes;
          async::tma_load_4d(base + uint32_t(kTile.q_offset(st.stage)) + off, &args.q_map, bars.full(st.stage),
                             pnl * int(kPanelCols), q_row, h, map_batch);
          async::tma_load_4d(base + uint32_t(kTile.do_offset(st.stage)) + off, &args.do_map, bars.full(st.stage),
                             pnl * int(kPanelCols), q_row, h, map_batch);
        }
      }
      // LSE (base 2) and D of the step's rows; rows past the sequence get 0 (the mask hides them).
      float* lse2 = reinterpret_cast<float*>(smem + kTile.lse_offset(st.stage));
      float* dsum = reinterpret_cast<float*>(smem + kTile.dsum_offset(st.stage));
      const int64_t q_row0 = attn::global_q_row(p, b, seq, m0);
#pragma unroll
      for (int r = lane; r < kBlockM; r += 32) {
        const bool valid = m0 + r < seq.sq;
        lse2[r] = valid ? p.lse.ptr[p.lse.offset(b, seq.q_start + m0 + r, h)] * attn::kLog2e : 0.0f;
        dsum[r] = valid ? a.dsum[int64_t(h) * p.total_q + q_row0 + r] : 0.0f;
      }
      async::mbarrier_arrive(bars.full(st.stage));
      st.advance();
    }
    return;
  }

  async::setmaxnreg_inc<kTile.consumer_regs>();
  const int consumer = warpgroup - 1;
  const int tid = int(threadIdx.x) % kWarpgroupThreads, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int key_row0 = consumer * kWgmmaRows;           // the warpgroup's first key row in the tile
  const int64_t warp_key0 = n0 + key_row0 + 16 * warp;  // this warp's first key in the sequence
  const int64_t wg_key0 = n0 + key_row0, wg_key1 = wg_key0 + kWgmmaRows - 1;
  const float scale_log2 = a.s.scale_log2;
  T* ds_tiles = reinterpret_cast<T*>(smem + kTile.ds_offset(0));
  const uint32_t dq_buffer = base + uint32_t(kTile.dq_offset(consumer));
  constexpr int kDsElems = kTile.ds_bytes() / 2;

  float dv[Consumer::kDFrags][4], dk[Consumer::kDFrags][4];
  Consumer::zero(dv);
  Consumer::zero(dk);
  if (steps > 0) async::mbarrier_wait(bars.kv_full, 0);
  PipelineState<kStages> st;
  for (int i = 0; i < steps; ++i) {
    const int h = step_head(i);
    const int64_t m0 = step_m0(i);
    const int valid_q = int(seq.sq - m0 < kBlockM ? seq.sq - m0 : kBlockM);
    async::mbarrier_wait(bars.full(st.stage), st.full_parity());
    const uint32_t q_tile = base + uint32_t(kTile.q_offset(st.stage));
    const uint32_t do_tile = base + uint32_t(kTile.do_offset(st.stage));
    float s[Consumer::kSFrags][4], dp[Consumer::kSFrags][4];
    Consumer::scores_issue(s, dp, base + uint32_t(kTile.k_offset()), base + uint32_t(kTile.v_offset()), key_row0,
                           q_tile, do_tile);

    // Element (f, e) of S^T: key warp_key0 + g + 8 (e / 2), query m0 + 8 f + 2 t + e % 2
    // (attn/fragment_mask.cuh). Query rows past the sequence are masked too (their LSE is a zero fill).
    const float* lse2 = reinterpret_cast<const float*>(smem + kTile.lse_offset(st.stage));
    const float* dsum = reinterpret_cast<const float*>(smem + kTile.dsum_offset(st.stage));
    const bool needs_mask =
        valid_q < kBlockM || !attn::tile_fully_visible(mask, m0, m0 + kBlockM - 1, wg_key0, wg_key1);
    uint32_t pa[Consumer::kRowSteps][4], da[Consumer::kRowSteps][4];
    if constexpr (!kGeneral) {
      // P^T while dP^T is still on the tensor cores; the scale is one multiply before exp2. The mask is a
      // pass of its own, taken only by the steps that need it (as in the forward), so that the others run
      // straight-line code; it overwrites what exp2 gave the hidden elements (inf at worst, never read).
      // A thread's two query columns 2 t, 2 t + 1 are adjacent: one 8-byte load of LSE and D each.
      // The LSE pairs are read before the wait, so their latency hides behind S^T's product.
      float2 l2[Consumer::kSFrags];
#pragma unroll
      for (int f = 0; f < Consumer::kSFrags; ++f) l2[f] = *reinterpret_cast<const float2*>(lse2 + 8 * f + 2 * t);
      wgmma::wait_group<1>();
      wgmma::fence_operands(s);
#pragma unroll
      for (int f = 0; f < Consumer::kSFrags; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[f][e] = ptx::exp2_approx(s[f][e] * scale_log2 - ((e & 1) ? l2[f].y : l2[f].x));
      if (needs_mask) {
#pragma unroll
        for (int f = 0; f < Consumer::kSFrags; ++f)
#pragma unroll
          for (int qb = 0; qb < 2; ++qb) {
            const attn::RelRange vis = attn::visible_rel(mask, m0 + 8 * f + 2 * t + qb, warp_key0, 16);
#pragma unroll
            for (int kh = 0; kh < 2; ++kh) {
              const int key_local = g + 8 * kh;
              if (key_local < vis.begin || key_local >= vis.end) s[f][2 * kh + qb] = 0.0f;
            }
          }
      }
      Consumer::pack(pa, s);
      wgmma::wait_group<0>();
      wgmma::fence_operands(dp);
#pragma unroll
      for (int f = 0; f < Consumer::kSFrags; ++f) {
        const float2 d = *reinterpret_cast<const float2*>(dsum + 8 * f + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[f][e] = s[f][e] * (dp[f][e] - ((e & 1) ? d.y : d.x));
      }
    } else {
      // Softcap / ALiBi: the logit transform of each raw dot product and its derivative (ScoreFn), both
      // products first, so that the raw S^T is read once, in the same pass as dP^T, with no third array.
      wgmma::wait_group<0>();
      wgmma::fence_operands(s);
      wgmma::fence_operands(dp);
      const attn::ScoreFn score = attn::ScoreFn::make(p.score, a.s, b, h);
#pragma unroll
      for (int f = 0; f < Consumer::kSFrags; ++f)
#pragma unroll
        for (int qb = 0; qb < 2; ++qb) {
          const int q_local = 8 * f + 2 * t + qb;
          const float l2 = lse2[q_local], d_row = dsum[q_local];
          const attn::RelRange vis =
              needs_mask ? attn::visible_rel(mask, m0 + q_local, warp_key0, 16) : attn::RelRange{0, 16};
          const int64_t diag = mask.diagonal(m0 + q_local);
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            const int e = 2 * kh + qb, key_local = g + 8 * kh;
            const float qk = s[f][e];
            float prob = ptx::exp2_approx(score.logit2(qk, diag - (warp_key0 + key_local)) - l2);
            if (key_local < vis.begin || key_local >= vis.end) prob = 0.0f;
            s[f][e] = prob;
            dp[f][e] = prob * (dp[f][e] - d_row) * score.dlogit(qk);
          }
        }
      Consumer::pack(pa, s);
    }
    Consumer::pack(da, dp);

    wgmma::fence();  // orders the packing, and the accumulators' last ordinary writes, before the products
    Consumer::keys_by_dims(dv, pa, do_tile);
    if constexpr (!kBulk) Consumer::keys_by_dims(dk, da, q_tile);
    wgmma::commit_group();

    // dS^T into this step's buffer, visible to the async proxy of both warpgroups (or this one's) before dQ.
    constexpr bool kDqSplit = Consumer::kTile.dq_split_columns();
    const auto share_ds = [&] {
      T* tile = ds_tiles + (i & 1) * kDsElems;
      Consumer::store_packed(tile, da, key_row0 + 16 * warp, lane);
      wgmma::fence_proxy_async();
      if constexpr (kDqSplit)
        async::named_barrier_sync(kBwdDsBarrier, kConsumerThreads);
      else
        async::named_barrier_sync(kBwdDsBarrier + uint32_t(consumer), kWarpgroupThreads);
      return tile;
    };
    if constexpr (kBulk) {
      T* ds_tile = share_ds();
      float dq[Consumer::kDqFrags][4];
      Consumer::dq_issue(dq, ptx::smem_addr(ds_tile), base + uint32_t(kTile.k_offset()), consumer);
      Consumer::keys_by_dims(dk, da, q_tile);
      wgmma::commit_group();
      wgmma::wait_group<1>();  // dV and dQ done; dK runs on while dQ goes to shared memory
      wgmma::fence_operands(dq);

      // dQ slice: rows 16 warp + g (+ 8) of the step, columns 8 j + 2 t (+ 1) of its 64-column block, into
      // this warpgroup's buffer in dq_accum's block layout (rows past the sequence hold zeros: their P is
      // masked), once the writer has read the previous step's.
      async::named_barrier_sync(kBwdDqEmptyBarrier + uint32_t(consumer), kBwdDqBarrierThreads);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * warp + g + 8 * half;
#pragma unroll
        for (int j = 0; j < Consumer::kDqFrags; ++j)
          ptx::st_shared_v2_f32(dq_buffer + 4u * uint32_t(dq_in_block(row, 8 * j + 2 * t)), dq[j][2 * half],
                                dq[j][2 * half + 1]);
      }
      wgmma::fence_proxy_async();
      async::named_barrier_arrive(true, kBwdDqFullBarrier + uint32_t(consumer), kBwdDqBarrierThreads);
      wgmma::wait_group<0>();
      wgmma::fence_operands(dv);
      wgmma::fence_operands(dk);
      wgmma::fence_operands(pa);
      wgmma::fence_operands(da);
      async::mbarrier_arrive(bars.empty(st.stage));  // the tensor cores are done reading Q and dO
    } else if constexpr (kDq) {
      // dQ after dV and dK, then each thread's reductions of its dQ pairs.
      T* ds_tile = share_ds();
      float dq[Consumer::kDqFrags][4];
      Consumer::dq_issue(dq, ptx::smem_addr(ds_tile), base + uint32_t(kTile.k_offset()), consumer);
      wgmma::wait_group<0>();
      wgmma::fence_operands(dv);
      wgmma::fence_operands(dk);
      wgmma::fence_operands(dq);
      wgmma::fence_operands(pa);
      wgmma::fence_operands(da);
      async::mbarrier_arrive(bars.empty(st.stage));
      // dQ slice: rows 16 warp + g (+ 8) of the step, columns col0 + 8 j + 2 t (+ 1).
      const int col0 = kTile.dq_split_columns() ? consumer * kTile.dq_cols() : 0;
      const int64_t q_row0 = attn::global_q_row(p, b, seq, m0);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * warp + g + 8 * half;
        if (row >= valid_q) continue;
#pragma unroll
        for (int j = 0; j < Consumer::kDqFrags; ++j) {
          const int col = col0 + 8 * j + 2 * t;
          if (col < p.head_dim)
            ptx::red_add_f32x2(a.dq_accum + attn::dq_accum_offset(q_row0 + row, h, col, p.heads, p.head_dim),
                               dq[j][2 * half], dq[j][2 * half + 1]);
        }
      }
    } else {
      wgmma::wait_group<0>();
      wgmma::fence_operands(dv);
      wgmma::fence_operands(dk);
      wgmma::fence_operands(pa);
      wgmma::fence_operands(da);
      async::mbarrier_arrive(bars.empty(st.stage));
    }
    st.advance();
  }

  // Epilogue: dV and dK rounded to T into the V and K tiles (both warpgroups are done reading K, which
  // dQ's products read across the warpgroups' rows), then each warpgroup stores its 64 rows.
  async::named_barrier_sync(kBwdEpilogueBarrier, kConsumerThreads);
  T* sk = reinterpret_cast<T*>(smem + kTile.k_offset());
  T* sv = reinterpret_cast<T*>(smem + kTile.v_offset());
  const float one[2] = {1.0f, 1.0f};
  const float dk_scale = kGeneral ? 1.0f : p.score.softmax_scale;
  const float dk_scales[2] = {dk_scale, dk_scale};
  sm80::store_acc<T, KVTile>(sv, dv, key_row0 + 16 * warp, 0, one, lane);
  sm80::store_acc<T, KVTile>(sk, dk, key_row0 + 16 * warp, 0, dk_scales, lane);
  async::named_barrier_sync(kBwdStoreBarrier + uint32_t(consumer), kWarpgroupThreads);
  const int64_t k_row = seq.k_start + n0 + key_row0;
  const int chunks = int(p.head_dim / 8);
  sm80::store_rows<KVTile, kWgmmaRows, kWarpgroupThreads>(static_cast<T*>(p.dv.ptr) + p.dv.offset(b, k_row, hk),
                                                          p.dv.row_stride, sv, key_row0, valid_keys - key_row0, chunks,
                                                          tid);
  sm80::store_rows<KVTile, kWgmmaRows, kWarpgroupThreads>(static_cast<T*>(p.dk.ptr) + p.dk.offset(b, k_row, hk),
                                                          p.dk.row_stride, sk, key_row0, valid_keys - key_row0, chunks,
                                                          tid);
}

// The instance of a dQ mode.
template <typename T, int kHeadDim, bool kGeneral>
auto bwd_instance(BwdDq mode) {
  return mode == BwdDq::bulk         ? bwd_kernel<T, kHeadDim, kGeneral, BwdDq::bulk>
         : mode == BwdDq::reductions ? bwd_kernel<T, kHeadDim, kGeneral, BwdDq::reductions>
                                     : bwd_kernel<T, kHeadDim, kGeneral, BwdDq::none>;
}

// Launches the main kernel of one (dtype, head-dim bucket): one CTA per (key tile, kv head, sequence).
// Instantiated in bwd_hdim<D>.cu; launch_bwd.cu runs the kernels around it. Without dq_accum (the
// deterministic mode) the instance without dQ.
template <typename T, int kHeadDim>
void run_bwd(const BwdArgs& args, cudaStream_t stream) {
  constexpr Sm90BwdTile kTile = bwd_tile(kHeadDim);
  const int64_t blocks = int64_t(args.base.num_n_blocks) * args.base.p.heads_k * args.base.p.batch;
  if (blocks == 0) return;
  const BwdDq mode = args.base.dq_accum == nullptr ? BwdDq::none : args.dq_bulk ? BwdDq::bulk : BwdDq::reductions;
  auto kernel = attn::needs_general_kernel(args.base.p) ? bwd_instance<T, kHeadDim, true>(mode)
                                                        : bwd_instance<T, kHeadDim, false>(mode);
  allow_dynamic_smem(kernel, size_t(kTile.smem_bytes()), args.base.p.device.index, "sm90 backward");
  kernel<<<grid_1d(blocks, "sm90 backward"), kTile.threads(), kTile.smem_bytes(), stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm90 backward kernel");
}

}  // namespace flashattn::detail::cuda::sm90
