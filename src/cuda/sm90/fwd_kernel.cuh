#pragma once

// The Hopper forward (cuda_sm90): warp-specialised, TMA loads into a ring of shared-memory stages guarded
// by mbarriers, wgmma products. One CTA per (query tile, head, sequence); docs/kernels.md, "cuda_sm90
// forward", has the design and the budgets. kGeneral: the instance for calls with softcap or ALiBi (their
// logit transform on the accumulators before the mask); the other instance folds the scale into exp2. Varlen
// calls (cu_seqlens) read each sequence's rows out of the packed tensors: a box that runs past a sequence's
// last row reads the next sequence's rows (TMA's bounds are the whole tensor's), which the mask hides (keys;
// their V rows are cleared, `produce`) or the epilogue does not store (queries). Paged K/V: boxes of a page
// each (`produce`). Roles:
//   warpgroup 0, the producer (setmaxnreg down to Tile.producer_regs): its first warp loads each work
//     tile's Q and visited K/V tiles into the ring's stages (`produce`);
//   warpgroups 1 .. kConsumers, the consumers (setmaxnreg up to Tile.consumer_regs): warpgroup c owns
//     query rows [64 (c - 1), 64 c) of the tile for the whole kernel. Per key tile: S = Q K^T (wgmma, both
//     operands in shared memory), the mask and online softmax of sm80 on the accumulators (wgmma's
//     accumulator layout is the mma.m16n8 one, cuda/common/wgmma.cuh), O += P V (wgmma, P from registers),
//     then each consumer thread arrives on `empty` once that product has completed (wgmma.wait_group 0:
//     the tensor cores are done reading V).
//   epilogue: each consumer warpgroup writes O / l into its own rows of the Q tile (only its wgmma read
//     them, and they completed), syncs its 128 threads on a named barrier and stores 16-byte chunks of
//     its rows; the LSE from registers.
//
// Ordering facts relied on: TMA's writes complete on the mbarrier (complete_tx) and a consumer's wait on it
// makes them visible to the async proxy that wgmma reads with; the consumers' arrivals on `empty` come
// after wgmma.wait_group 0, so the producer's next TMA into that stage cannot overtake a read.

#include <cuda.h>

#include <cstdint>

#include "common/score.h"
#include "cuda/attn/fragment_mask.cuh"
#include "cuda/attn/paged_keys.h"
#include "cuda/attn/softmax.cuh"
#include "cuda/attn/tile_range.h"
#include "cuda/common/async_ptx.cuh"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/smem_layout.h"
#include "cuda/sm80/tile_copy.cuh"
#include "cuda/sm90/args.h"
#include "cuda/sm90/fwd_tile.h"
#include "cuda/sm90/pipeline.h"

namespace flashattn::detail::cuda::sm90 {

// The consumer warpgroups' share: per key tile, S = Q K^T, the softmax, and O += P V on kHeadDim columns.
template <typename T, int kHeadDim>
struct FwdConsumer {
  static constexpr Sm90FwdTile kTile = fwd_tile(kHeadDim);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n;
  static constexpr int kSFrags = kBlockN / 8;   // n8 column groups of S
  static constexpr int kOFrags = kHeadDim / 8;  // n8 column groups of O
  static constexpr int kQKSteps = kHeadDim / 16;
  static constexpr int kPVSteps = kBlockN / 16;
  static_assert((kBlockN == 80 || kBlockN == 112 || kBlockN == 128) &&
                    (kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256),
                "the wgmma wrappers: m64n80k16 / m64n112k16 / m64n128k16 (S), m64n64k16 / m64n128k16 / m64n192k16 / "
                "m64n256k16 (O)");

  // Issues S = Q K^T for this warpgroup's 64 rows (q_base: the Q tile; row0: the warpgroup's first row in
  // it); finish(s) waits for it.
  __device__ __forceinline__ static void qk_issue(float (&s)[kSFrags][4], uint32_t q_base, int row0, uint32_t k_base) {
#pragma unroll
    for (int j = 0; j < kSFrags; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    const uint64_t q_desc = wgmma::smem_desc(q_base + kmajor_start(kBlockM, row0, 0), 16, kSwizzleAtomBytes);
    const uint64_t k_desc = wgmma::smem_desc(k_base, 16, kSwizzleAtomBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kQKSteps; ++kk)
      wgmma::mma_ss_m64k16<T, kSFrags>(
          s, wgmma::desc_advance(q_desc, kmajor_start(kBlockM, row0, kk) - kmajor_start(kBlockM, row0, 0)),
          wgmma::desc_advance(k_desc, kmajor_start(kBlockN, 0, kk)));
    wgmma::commit_group();
  }

  // Waits for this warpgroup's products in flight, the last of which writes `acc`, and keeps the
  // compiler's reads of acc after the wait.
  template <int kN>
  __device__ __forceinline__ static void finish(float (&acc)[kN][4]) {
    wgmma::wait_group<0>();
    wgmma::fence_operands(acc);
  }

  // P = s (fp32 probabilities of this warp's rows) rounded to T in registers: two adjacent n8 groups of
  // the accumulator are the A fragment of one k16 step (cuda/common/wgmma.cuh).
  __device__ __forceinline__ static void pack_p(uint32_t (&pa)[kPVSteps][4], const float (&s)[kSFrags][4]) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      pa[kk][0] = ptx::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = ptx::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = ptx::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = ptx::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }

  // Issues O += P V with P packed by pack_p; pa must stay untouched until the product completes.
  __device__ __forceinline__ static void pv_issue_packed(float (&o)[kOFrags][4], uint32_t (&pa)[kPVSteps][4],
                                                         uint32_t v_base) {
    const uint64_t v_desc = wgmma::smem_desc(v_base, mnmajor_leading(kBlockN), kSwizzleAtomBytes);
    wgmma::fence();  // orders the packing and the rescale of o before the wgmma reads them
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
      wgmma::mma_rs_m64k16_tn<T, kOFrags>(o, pa[kk], wgmma::desc_advance(v_desc, mnmajor_start(kk)));
    wgmma::commit_group();
  }

  // Issues O += P V with P = s; finish(o) waits for it.
  __device__ __forceinline__ static void pv_issue(float (&o)[kOFrags][4], const float (&s)[kSFrags][4],
                                                  uint32_t v_base) {
    uint32_t pa[kPVSteps][4];
    pack_p(pa, s);
    pv_issue_packed(o, pa, v_base);
  }
};

// Where work tile `tile` lies: tiles are (query tile, head, sequence) in args.order (attn/tile_order.h): by
// default query tiles of a head consecutive and heaviest (last, under a causal mask) first; a masked call's
// order groups heads (tile_coord, one more division, taken only where the order is not per head).
// kGroupedOrder false: the per-head order whatever args.order says (the softcap/ALiBi D = 256 instance,
// whose consumers spilled 32 -> 100 bytes with tile_coord beside their state).
struct Sm90TilePlace {
  int64_t b = 0, h = 0, m0 = 0;  // m0: the tile's first query row in its sequence
  SeqRange seq;                  // the sequence's rows in q and k (common/score.h; clamped values)
  int valid_rows = 0;            // 0: none (a varlen sequence shorter than max_seqlen_q)
  int n_begin = 0, n_end = 0;
};

template <int kBlockM, int kBlockN, bool kGroupedOrder = true>
__device__ __forceinline__ Sm90TilePlace place_tile(const FwdArgs& args, uint32_t tile) {
  Sm90TilePlace t;
  // 32-bit divisions (supports_fwd: fewer than 2^31 tiles): 64-bit ones are calls, which the producer's
  // few registers cannot afford.
  int m_block;
  uint32_t head_seq;
  if (!kGroupedOrder || args.order.per_head()) {
    m_block = args.num_m_blocks - 1 - int(tile % uint32_t(args.num_m_blocks));
    head_seq = tile / uint32_t(args.num_m_blocks);
  } else {
    const attn::TileCoord c = attn::tile_coord(int(tile), args.order);
    m_block = c.m_block;
    head_seq = uint32_t(c.head_seq);
  }
  t.h = head_seq % uint32_t(args.p.heads);
  t.b = head_seq / uint32_t(args.p.heads);
  t.seq = seq_range(args.p, t.b);
  t.m0 = int64_t(m_block) * kBlockM;
  if (t.m0 >= t.seq.sq) return t;
  const int64_t rows = t.seq.sq - t.m0;
  t.valid_rows = int(rows < kBlockM ? rows : kBlockM);
  const Mask mask = make_mask(args.p.score, t.seq.sq, t.seq.sk);
  const attn::Range keys = attn::keys_for_rows(mask, t.m0, t.m0 + t.valid_rows - 1);
  t.n_begin = int(keys.begin / kBlockN);
  t.n_end = keys.end > keys.begin ? int((keys.end + kBlockN - 1) / kBlockN) : t.n_begin;
  return t;
}

// The mbarriers after the tiles (fwd_tile.h, barrier_offset): q_full, then k_full, v_full and empty per
// stage, then v_edge (the V tile a varlen CTA loads last, before its rows past the sequence are cleared),
// then q_empty (the consumers are done with the Q tile: the next one may load), then the dynamic tile
// scheduler's sched_full and sched_empty per slot and the slots' tile words (DynamicTiles).
template <int kStages>
struct FwdBarriers {
  uint32_t q_full;
  __device__ __forceinline__ uint32_t k_full(int s) const { return q_full + 8u * uint32_t(1 + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return q_full + 8u * uint32_t(1 + kStages + s); }
  __device__ __forceinline__ uint32_t empty(int s) const { return q_full + 8u * uint32_t(1 + 2 * kStages + s); }
  uint32_t v_edge = q_full + 8u * uint32_t(1 + 3 * kStages);
  uint32_t q_empty = v_edge + 8u;
  __device__ __forceinline__ uint32_t sched_full(uint32_t s) const { return q_empty + 8u * (1u + s); }
  __device__ __forceinline__ uint32_t sched_empty(uint32_t s) const { return q_empty + 8u * (1u + kSchedSlots + s); }
  // Byte offset of the slots' words from q_full.
  static constexpr uint32_t kSchedWordsOffset = 8u * uint32_t(3 + 3 * kStages + 2 * kSchedSlots);
};

// The persistent grid's dynamic order (args.tile_counter): a CTA starts with work tile blockIdx.x, and each
// time its producer has issued a tile's loads it draws the next one from the call's counter (gridDim.x +
// atomicAdd), so an SM that finishes early takes the next tile of the list (heaviest first where the list
// is ordered so, attn/tile_order.h) instead of the tile a static deal gave it. The producer hands each draw
// to the consumers through a ring of kSchedSlots shared words: draw j goes to slot j % kSchedSlots, published
// by an arrival on sched_full (release) and freed by the consumer threads' arrivals on sched_empty after
// they read it (the same phases as the K/V ring, pipeline.h). A draw past the list ends both loops.
struct DynamicTiles {
  volatile uint32_t* words;  // the slots' tile words (shared memory)
  uint32_t draws = 0;        // draws so far (the slot and phase of the next)

  // Producer (one thread): draws the next tile and publishes it.
  template <int kStages>
  __device__ __forceinline__ uint32_t draw(uint32_t* counter, const FwdBarriers<kStages>& bars) {
    const uint32_t tile = gridDim.x + atomicAdd(counter, 1u);
    const uint32_t slot = sched_slot(draws);
    async::mbarrier_wait(bars.sched_empty(slot), sched_phase(draws) ^ 1u);
    words[slot] = tile;
    async::mbarrier_arrive(bars.sched_full(slot));
    ++draws;
    return tile;
  }
  // Consumers (every thread): the producer's next draw.
  template <int kStages>
  __device__ __forceinline__ uint32_t next(const FwdBarriers<kStages>& bars) {
    const uint32_t slot = sched_slot(draws);
    async::mbarrier_wait(bars.sched_full(slot), sched_phase(draws));
    const uint32_t tile = words[slot];
    async::mbarrier_arrive(bars.sched_empty(slot));
    ++draws;
    return tile;
  }
};

// Zeroes rows [first_row, kBlockN) of the V stage at shared address `stage` (every panel): whole 128-byte
// panel rows, so the swizzle inside a row does not matter. The 32 lanes of the producer warp, 16 bytes each
// per store; each lane then orders its writes before the async proxy (wgmma) reads the stage.
template <int kBlockN, int kPanels>
__device__ __forceinline__ void clear_rows(uint32_t stage, int first_row, int lane) {
  constexpr int kChunks = int(kPanelRowBytes / 16);
  const int chunks = (kBlockN - first_row) * kChunks;  // per panel
  for (int pnl = 0; pnl < kPanels; ++pnl)
    for (int i = lane; i < chunks; i += 32)
      ptx::st_shared_zero16(stage + uint32_t(pnl * kBlockN + first_row) * kPanelRowBytes + uint32_t(i) * 16u);
  wgmma::fence_proxy_async();
}

// Issues the TMA of one box (every panel) of K or V (`map`) into rows [box_row0, box_row0 + box) of the tile
// at shared address `tile`: map coordinates (row, kv head, batch).
template <Sm90FwdTile kTile>
__device__ __forceinline__ void load_box(const CUtensorMap* map, uint32_t tile, uint32_t bar, int box_row0, int row,
                                         int hk, int batch) {
  const uint32_t dst = tile + uint32_t(box_row0) * kPanelRowBytes;
#pragma unroll
  for (int pnl = 0; pnl < kTile.panels(); ++pnl)
    async::tma_load_4d(dst + uint32_t(pnl * kTile.block_n) * kPanelRowBytes, map, bar, pnl * int(kPanelCols), row, hk,
                       batch);
}

// What the producer carries from one work tile to the next: the ring's stage and phase, how many tiles it
// has loaded (q_empty's parity) and how many edge clears it has done (v_edge's).
template <int kStages>
struct ProducerState {
  PipelineState<kStages> ring;
  uint32_t tiles = 0, edges = 0;
};

// Issues the TMA of a work tile's Q (every panel) on q_full at map coordinates (row, head, batch), once the
// consumers have released the previous tile's Q (q_empty). Q rows past the sequence arrive as zeros or the
// next sequence's rows, never stored; the byte count is the box's.
template <Sm90FwdTile kTile>
__device__ __forceinline__ void load_q(const FwdArgs& args, uint32_t base, const FwdBarriers<kTile.stages>& bars,
                                       uint32_t tiles_done, int row, int head, int batch) {
  if (tiles_done > 0) async::mbarrier_wait(bars.q_empty, (tiles_done - 1) & 1u);
  async::mbarrier_arrive_expect_tx(bars.q_full, uint32_t(kTile.q_bytes()));
#pragma unroll
  for (int pnl = 0; pnl < kTile.panels(); ++pnl)
    async::tma_load_4d(base + uint32_t(pnl * kTile.block_m) * kPanelRowBytes, &args.q_map, bars.q_full,
                       pnl * int(kPanelCols), row, head, batch);
}

// The producer warp, per work tile: lane 0 issues the TMA of each visited K/V tile into the ring's next
// stage (K on k_full, V on v_full) after that stage's `empty` barrier, and of the tile's Q between the
// first K tile and its V (Q waits for the previous tile's consumers, K only for a free stage: the first K
// tile streams in while the previous tile's epilogue runs, and the first Q K^T needs only K and Q); in a paged call
// every lane loads one box of each key tile (below). Every lane walks the ring. Lean on purpose: the producer runs on
// 24-32 registers (setmaxnreg), and what does not fit spills.
//
// Keys past the sequence in a K/V box: a dense call's map ends at seqlen_k, so TMA fills them with zeros.
// A varlen call's map is the packed tensor (the next sequence's rows) and a paged call's box is a page's
// rows (unused ones hold whatever the cache had): the mask gives their keys P = 0, but a non-finite V row
// would still make 0 x inf = NaN in P V. So the last V tile of such a tile, if it runs past the sequence,
// completes on v_edge instead; the warp clears its rows past the sequence and then completes v_full itself.
template <Sm90FwdTile kTile>
__device__ __forceinline__ void produce(const FwdArgs& args, const Sm90TilePlace& t, uint32_t base,
                                        const FwdBarriers<kTile.stages>& bars, int lane,
                                        ProducerState<kTile.stages>& ps) {
  constexpr int kBlockN = kTile.block_n;
  const FwdProblem& p = args.p;
  // Rows of the last key tile inside its varlen sequence where the tile runs past it (else kBlockN).
  const int edge_rows = p.cu_seqlens_q != nullptr && t.n_begin < t.n_end && int64_t(t.n_end) * kBlockN > t.seq.sk
                            ? int(t.seq.sk - int64_t(t.n_end - 1) * kBlockN)
                            : kBlockN;
  const int n_end = t.n_end, h = int(t.h), hk = h / args.group;
  // Dense maps index (row in the sequence, head, sequence); varlen maps (packed row, head, 0).
  const int q_row = int(t.seq.q_start + t.m0), q_batch = p.cu_seqlens_q != nullptr ? 0 : int(t.b);
  int last_stage = 0;
  if (args.paged_box_rows == 0) {
    // Dense and varlen: lane 0 loads each whole tile at (row, kv head, sequence or 0).
    const int k_row0 = int(t.seq.k_start);
    for (int n = t.n_begin; n < n_end; ++n) {
      if (lane == 0) {
        const uint32_t v_bar = n + 1 == n_end && edge_rows < kBlockN ? bars.v_edge : bars.v_full(ps.ring.stage);
        async::mbarrier_wait(bars.empty(ps.ring.stage), ps.ring.empty_parity());
        async::mbarrier_arrive_expect_tx(bars.k_full(ps.ring.stage), uint32_t(kTile.kv_bytes()));
        async::mbarrier_arrive_expect_tx(v_bar, uint32_t(kTile.kv_bytes()));
        const int row = k_row0 + n * kBlockN;
        load_box<kTile>(&args.k_map, base + uint32_t(kTile.k_offset(ps.ring.stage)), bars.k_full(ps.ring.stage), 0, row,
                        hk, q_batch);
        if (n == t.n_begin) load_q<kTile>(args, base, bars, ps.tiles, q_row, h, q_batch);
        load_box<kTile>(&args.v_map, base + uint32_t(kTile.v_offset(ps.ring.stage)), v_bar, 0, row, hk, q_batch);
      }
      last_stage = ps.ring.stage;
      ps.ring.advance();
    }
  } else {
    // Paged: lane c loads box c of each key tile (rows c * box .. of the tile, inside one page) from the
    // block its table entry names. Entries are read only inside the sequence's own columns; a box past them
    // (keys past the sequence) and a bad entry (negative, past the pool) are coordinates outside the map,
    // which TMA fills with zeros: no read leaves the cache.
    const int box = args.paged_box_rows;
    const bool boxed_lane = lane * box < kBlockN;
    const int32_t* table = p.paged.block_table + t.b * p.paged.block_table_stride;
    const uint32_t page_size = uint32_t(p.paged.page_size);
    uint32_t key = uint32_t(t.n_begin * kBlockN + lane * box);  // supports_fwd: positions below 2^30
    for (int n = t.n_begin; n < n_end; ++n, key += kBlockN) {
      int block = -1, row = 0;
      if (boxed_lane) {
        const uint32_t column = key / page_size;
        row = int(key - column * page_size);
        if (column < uint32_t(args.paged_columns)) block = table[column];
      }
      const uint32_t v_bar = n + 1 == n_end && edge_rows < kBlockN ? bars.v_edge : bars.v_full(ps.ring.stage);
      async::mbarrier_wait(bars.empty(ps.ring.stage), ps.ring.empty_parity());
      if (lane == 0) {
        async::mbarrier_arrive_expect_tx(bars.k_full(ps.ring.stage), uint32_t(kTile.kv_bytes()));
        async::mbarrier_arrive_expect_tx(v_bar, uint32_t(kTile.kv_bytes()));
      }
      __syncwarp();  // the barriers are armed before any box completes on them
      if (boxed_lane)
        load_box<kTile>(&args.k_map, base + uint32_t(kTile.k_offset(ps.ring.stage)), bars.k_full(ps.ring.stage),
                        lane * box, row, hk, block);
      if (lane == 0 && n == t.n_begin) load_q<kTile>(args, base, bars, ps.tiles, q_row, h, q_batch);
      if (boxed_lane)
        load_box<kTile>(&args.v_map, base + uint32_t(kTile.v_offset(ps.ring.stage)), v_bar, lane * box, row, hk, block);
      last_stage = ps.ring.stage;
      ps.ring.advance();
    }
  }
  if (lane == 0 && t.n_begin == n_end) load_q<kTile>(args, base, bars, ps.tiles, q_row, h, q_batch);
  if (edge_rows < kBlockN) {
    async::mbarrier_wait(bars.v_edge, ps.edges & 1u);
    ++ps.edges;
    clear_rows<kBlockN, kTile.panels()>(base + uint32_t(kTile.v_offset(last_stage)), edge_rows, lane);
    __syncwarp();
    if (lane == 0) async::mbarrier_arrive(bars.v_full(last_stage));
  }
  ++ps.tiles;
}

// Paged K/V whose page size has no TMA box (args.paged_rows: no divisor of the key tile that is a multiple of 8,
// page sizes 1-7 or 100 say; FLASHATTN_SM90_PAGED_ROWS=1 forces it everywhere): the producer warpgroup's 128
// threads copy each visited K and V tile with 16-byte cp.async (fwd_tile.h, row_copy_*: two threads a row),
// looking each row's page up once per tile (attn::PagedKeyRows: entries clamped to the pool). Rows past the
// sequence, every row of an empty pool (paged_columns 0) and chunks past the head dim are zero-filled (source
// size 0): nothing outside the cache is read, and V's rows past the sequence are zeros without a clear. Each
// thread completes k_full after its K copies and v_full after its V copies (cp.async.mbarrier.arrive.noinc:
// those barriers count 128 arrivals in such a call); the consumers fence the async proxy after their waits
// (the copies are generic-proxy writes). Q stays a TMA load by thread 0, between the first K tile and its V
// as in `produce`. Where boxes exist they measured faster (docs/kernels.md, "Paged K/V").
template <Sm90FwdTile kTile>
__device__ __forceinline__ void produce_paged_rows(const FwdArgs& args, const Sm90TilePlace& t, uint32_t base,
                                                   const FwdBarriers<kTile.stages>& bars, int tid,
                                                   ProducerState<kTile.stages>& ps) {
  constexpr int kBlockN = kTile.block_n, kPasses = row_copy_passes(kBlockN);
  constexpr int kRowChunks = kTile.head_dim / 8 / kRowCopyThreadsPerRow;  // chunks a thread copies per row
  const FwdProblem& p = args.p;
  const attn::PagedKeyRows pages = attn::paged_key_rows(p.paged, args.page_div, t.b);
  const int h = int(t.h), hk = h / args.group, n_end = t.n_end;
  const int q_row = int(t.seq.q_start + t.m0), q_batch = p.cu_seqlens_q != nullptr ? 0 : int(t.b);
  // Keys with a row to copy: the sequence's (at most its columns' capacity, seq_range), none in an empty pool.
  const int keys = args.paged_columns > 0 ? int(t.seq.sk) : 0, chunk0 = row_copy_chunk(tid, 0);
  // Copies j < copies of a row hold chunks inside the head dim (chunk0 + 2 j < head_dim / 8): one compare
  // with an immediate per copy.
  const int copies = (int(p.head_dim / 8) - chunk0 + 1) / 2;
  const uint32_t thread_base = row_copy_base(tid);
  // Copies the thread's rows of key tile n of K or V (`view`) into the stage at `tile`.
  const auto copy_tile = [&](const RowsView& view, uint32_t tile, int n) {
    const char* head = static_cast<const char*>(view.ptr) + (int64_t(hk) * view.head_stride + chunk0 * 8) * 2;
#pragma unroll 1
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = row_copy_row(tid, pass);
      if (kBlockN % kRowCopyRowStep != 0 && row >= kBlockN) break;
      const int key = n * kBlockN + row;
      const bool row_in = key < keys;
      const int row_copies = row_in ? copies : 0;
      const char* src = head;
      if (row_in) src += pages.row_offset(key, view.batch_stride, view.row_stride) * 2;
#pragma unroll
      for (int j = 0; j < kRowChunks; ++j)
        ptx::cp_async_16(tile + row_copy_offset(thread_base, kBlockN, pass, j), src + 32 * j, j < row_copies);
    }
  };
  // Key tile n: K, then Q (thread 0, first tile only), then V.
  const auto copy_kv = [&](int n, bool with_q) {
    async::mbarrier_wait(bars.empty(ps.ring.stage), ps.ring.empty_parity());
    copy_tile(p.k, base + uint32_t(kTile.k_offset(ps.ring.stage)), n);
    async::cp_async_mbarrier_arrive(bars.k_full(ps.ring.stage));
    if (with_q && tid == 0) load_q<kTile>(args, base, bars, ps.tiles, q_row, h, q_batch);
    copy_tile(p.v, base + uint32_t(kTile.v_offset(ps.ring.stage)), n);
    async::cp_async_mbarrier_arrive(bars.v_full(ps.ring.stage));
    ps.ring.advance();
  };
  // The first tile apart, so that Q's coordinates are not live in the loop (the producer's 40 registers).
  if (t.n_begin < n_end)
    copy_kv(t.n_begin, true);
  else if (tid == 0)
    load_q<kTile>(args, base, bars, ps.tiles, q_row, h, q_batch);
  for (int n = t.n_begin + 1; n < n_end; ++n) copy_kv(n, false);
  ++ps.tiles;
}

// Named barriers (0 is __syncthreads): the epilogue's, one per consumer warpgroup, and the ping-pong turns.
// kProducerBarrier: the producer warpgroup's 128 threads, where all of them copy (args.paged_rows).
inline constexpr uint32_t kEpilogueBarrier = 1, kTurnBarrier = 3, kProducerBarrier = 5;

template <typename T, int kHeadDim, bool kGeneral>
__global__ void __launch_bounds__(fwd_tile(kHeadDim).threads(), 1) fwd_kernel(const __grid_constant__ FwdArgs args) {
  constexpr Sm90FwdTile kTile = fwd_tile(kHeadDim, kGeneral);
  constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kStages = kTile.stages;
  static_assert(kTile.registers_fit(), "setmaxnreg budgets exceed the register file");
  // With ping-pong, warpgroup 0's turn for key tile n waits for K[n], whose stage warpgroup 1 releases in
  // its turn for tile n - kStages + 1: with one stage that turn comes after the wait (a deadlock).
  static_assert(kStages >= 2, "the ping-pong turns need two stages at least");
  using Consumer = FwdConsumer<T, kHeadDim>;
  using QTile = sm80::SmemTile<kBlockM, kHeadDim>;  // the same layout (fwd_tile.h), for the epilogue

  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and both TMA and wgmma derive it from address bits 4-9:
  // every tile must start on a 1024-byte boundary (smem_bytes() includes the slack).
  const uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const uint32_t pad = (kSwizzleAtomBytes - raw_addr % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  unsigned char* smem = smem_raw + pad;
  const uint32_t base = raw_addr + pad;
  const FwdBarriers<kStages> bars{base + uint32_t(kTile.barrier_offset())};
  volatile uint32_t* const sched_words =
      reinterpret_cast<volatile uint32_t*>(smem + kTile.barrier_offset() + FwdBarriers<kStages>::kSchedWordsOffset);
  constexpr uint32_t kConsumerThreads = uint32_t(kTile.consumer_warpgroups() * kWarpgroupThreads);
  constexpr bool kPersistent = fwd_persistent(kHeadDim, kGeneral);
  constexpr bool kGroupedOrder = !(kGeneral && kHeadDim == 256);

  const FwdProblem& p = args.p;
  // Work tiles (query tile, head, sequence) in place_tile's order, CTA c taking c, then c + gridDim.x, ...
  // (static) or the tiles it draws (DynamicTiles, args.tile_counter): a persistent grid of one CTA per SM
  // (run_fwd), or one tile per CTA (and the one-tile code of an instance that is never persistent,
  // fwd_persistent).
  const uint32_t tiles = uint32_t(args.num_m_blocks * p.heads * p.batch);
  const int warpgroup = int(threadIdx.x) / kWarpgroupThreads;

  if (threadIdx.x == 0) {
    async::mbarrier_init(bars.q_full, 1);
    // One arrival with the TMA bytes, or one per producer thread whose copies complete it (args.paged_rows).
    const uint32_t kv_arrivals = args.paged_rows ? uint32_t(kWarpgroupThreads) : 1u;
    for (int s = 0; s < kStages; ++s) {
      async::mbarrier_init(bars.k_full(s), kv_arrivals);
      async::mbarrier_init(bars.v_full(s), kv_arrivals);
      async::mbarrier_init(bars.empty(s), kConsumerThreads);
    }
    async::mbarrier_init(bars.v_edge, 1);
    async::mbarrier_init(bars.q_empty, kConsumerThreads);
    for (uint32_t s = 0; s < kSchedSlots; ++s) {
      async::mbarrier_init(bars.sched_full(s), 1);
      async::mbarrier_init(bars.sched_empty(s), kConsumerThreads);
    }
    async::fence_mbarrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    async::setmaxnreg_dec<kTile.producer_regs>();
    // The first warp loads (TMA), or the whole warpgroup copies paged rows (produce_paged_rows).
    const bool rows = args.paged_rows;
    if (threadIdx.x >= 32 && !rows) return;
    if (threadIdx.x == 0) {
      async::prefetch_tensormap(&args.q_map);
      if (!rows) {
        async::prefetch_tensormap(&args.k_map);
        async::prefetch_tensormap(&args.v_map);
      }
    }
    ProducerState<kStages> ps;
    DynamicTiles dyn{sched_words};
    for (uint32_t tile = blockIdx.x; tile < tiles;) {
      const Sm90TilePlace t = place_tile<kBlockM, kBlockN, kGroupedOrder>(args, tile);
      if (t.valid_rows > 0) {
        if (rows)
          produce_paged_rows<kTile>(args, t, base, bars, int(threadIdx.x), ps);
        else
          produce<kTile>(args, t, base, bars, int(threadIdx.x), ps);
      }
      if (!kPersistent) break;
      if (args.tile_counter != nullptr) {
        uint32_t next = 0;
        if (threadIdx.x == 0) next = dyn.draw(args.tile_counter, bars);
        if (rows) {
          // The other 127 read the draw from its slot after a barrier of the warpgroup (and count it as
          // thread 0's draw counted it): thread 0 writes that slot again two draws later, after the next such
          // barrier, which each thread passes after reading.
          async::named_barrier_sync(kProducerBarrier, kWarpgroupThreads);
          if (threadIdx.x != 0) ++dyn.draws;
          next = sched_words[sched_slot(dyn.draws - 1)];
        } else {
          next = __shfl_sync(0xffffffffu, next, 0);
        }
        tile = next;
      } else {
        tile += gridDim.x;
      }
    }
    // Row copies still in flight complete the barriers the consumers wait for: they finish before the thread.
    if (rows) {
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
    }
    return;
  }

  async::setmaxnreg_inc<kTile.consumer_regs>();
  const int consumer = warpgroup - 1;
  const int tid = int(threadIdx.x) % kWarpgroupThreads, lane = tid & 31, warp = tid >> 5;
  const int wg_row0 = consumer * kWgmmaRows;  // the warpgroup's first row in the tile
  const int warp_row0 = wg_row0 + 16 * warp;  // this warp's 16 rows (wgmma's D layout)
  // Ping-pong (args.pingpong): the two consumer warpgroups take turns at issuing their products, so that
  // one's softmax runs while the other's products occupy the tensor cores. A turn is the section from
  // P V of tile n to the issue of Q K^T of tile n + 1 (the first: Q K^T of the first tile); warpgroup c
  // waits for its turn on named barrier kTurnBarrier + c (its 128 threads sync, the other warpgroup's 128
  // arrive) and hands the turn over right after its last issue. Per work tile, consumer 1 hands warpgroup 0
  // its first turn and does not hand over after its last: every sync has exactly one arrival (both
  // warpgroups visit the same key tiles), and a work tile's turns end before the next one's begin.
  const bool pingpong = args.pingpong && kTile.consumer_warpgroups() == 2;
  const uint32_t my_turn = kTurnBarrier + uint32_t(consumer), other_turn = kTurnBarrier + uint32_t(consumer ^ 1);
  constexpr uint32_t kTurnThreads = 2 * kWarpgroupThreads;
  // O's staging tile: its own (the next tile's Q loads during this one's epilogue), or Q's rows.
  T* so = reinterpret_cast<T*>(smem + kTile.o_offset());
  // Each consumer thread arrives on q_empty once per work tile, when its warpgroup's products no longer
  // read Q: after the tile's last Q K^T where O has its own tile, after the epilogue's reads where O is
  // staged in Q's rows (their generic-proxy accesses ordered before the next Q's TMA writes).
  const auto release_q = [&] { async::mbarrier_arrive(bars.q_empty); };

  // A consumer's wait for a K or V stage; where the producer copied it with cp.async (generic-proxy writes),
  // the fence orders those writes before the async proxy's wgmma reads.
  const auto wait_kv = [&](uint32_t bar, uint32_t parity) {
    async::mbarrier_wait(bar, parity);
    wgmma::fence_proxy_async_if(args.paged_rows);
  };
  PipelineState<kStages> st;
  uint32_t tiles_done = 0;
  const auto consume = [&](uint32_t tile) {
    const Sm90TilePlace t = place_tile<kBlockM, kBlockN, kGroupedOrder>(args, tile);
    if (t.valid_rows == 0) return;  // uniform over the CTA
    const Mask mask = make_mask(p.score, t.seq.sq, t.seq.sk);

    float o[Consumer::kOFrags][4];
#pragma unroll
    for (int j = 0; j < Consumer::kOFrags; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    attn::OnlineSoftmax<1> softmax;
    softmax.init();

    // Q is waited for even without keys: the epilogue may stage O in Q's rows, which TMA may still be writing.
    async::mbarrier_wait(bars.q_full, tiles_done & 1u);
    float s[1][Consumer::kSFrags][4];  // one 16-row fragment row per warp: sm80's [mf][f][e] view
    attn::ScoreArgs score_args;
    score_args.scale_log2 = args.scale_log2;
    const attn::ScoreFn score = attn::ScoreFn::make(p.score, score_args, t.b, t.h);
    // Logits (kGeneral), mask and online softmax of key tile n in s (P afterwards); O's factors in rescale.
    const auto softmax_only = [&](int n, float(&rescale)[1][2]) {
      const int64_t key0 = int64_t(n) * kBlockN;
      if constexpr (kGeneral) attn::logits_rowmajor(s, score, mask, t.m0 + warp_row0, key0, lane);
      if (!attn::tile_fully_visible(mask, t.m0, t.m0 + t.valid_rows - 1, key0, key0 + kBlockN - 1))
        attn::mask_rowmajor(s, mask, t.m0 + warp_row0, key0, lane);
      softmax.template update<Consumer::kSFrags, true>(s, rescale, kGeneral ? 1.0f : args.scale_log2, args.max_slack);
    };
    // Every factor is exactly 1 while no row max of the warp moves (args.max_slack lets a max grow by that
    // much before it moves): skip the multiplies then (a warp-uniform vote; the product that reads o is
    // warpgroup-wide but reads it only after its fence).
    const auto rescale_o = [&](const float(&rescale)[1][2]) {
      if (__any_sync(0xffffffffu, rescale[0][0] != 1.0f || rescale[0][1] != 1.0f)) {
#pragma unroll
        for (int j = 0; j < Consumer::kOFrags; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[j][e] *= rescale[0][e >> 1];
      }
    };
    const auto softmax_tile = [&](int n) {
      float rescale[1][2];
      softmax_only(n, rescale);
      rescale_o(rescale);
    };
    // Q K^T of key tile n has completed: was it the tile's last?
    const auto qk_done = [&](int n) {
      if (kTile.o_separate() && n + 1 == t.n_end) release_q();
    };
    if (kTile.o_separate() && t.n_begin == t.n_end) release_q();  // no key tile
    if (t.n_begin < t.n_end) {
      if (pingpong) {
        async::named_barrier_arrive(consumer == 1, other_turn, kTurnThreads);
        async::named_barrier_sync(my_turn, kTurnThreads);
      }
      wait_kv(bars.k_full(st.stage), st.full_parity());
      Consumer::qk_issue(s[0], base, wg_row0, base + uint32_t(kTile.k_offset(st.stage)));
      async::named_barrier_arrive(pingpong, other_turn, kTurnThreads);
      Consumer::finish(s[0]);
      qk_done(t.n_begin);
      softmax_tile(t.n_begin);
    }
    int n = t.n_begin;
    // Compiled for the 64 bucket only, where it measured faster (sm90/backend.cpp): the larger buckets'
    // kernels stay without its registers.
    if (kHeadDim == 64 && args.overlap) {
      // Both products of a pass issued together (args.overlap): S of tile n + 1 is issued before O += P V of
      // tile n; P of tile n waits in registers (pa), packed before S is overwritten; O's rescale for tile
      // n + 1 waits for the product of tile n (which was computed with tile n's maxima). The source waits
      // for S alone (wait_group<1>: groups complete in issue order) before the softmax, but ptxas hoists the
      // wait_group<0> above the softmax's exp2s, so the softmax runs after both products, while the other
      // warpgroup's run. Keeping the softmax before that wait (wgmma::hold_wait_after, as the FP8 kernel
      // does) measured slower here: 0.95-0.96x at D = 64 (bench/NOTES.md, session 25).
      // Every pass issues both products, and the last tile's P V is left to the plain loop below: a product
      // issued under a condition while another is in flight makes ptxas serialise every wgmma of the kernel
      // (C7514). With the ping-pong, a turn is the issue of both products.
      uint32_t pa[Consumer::kPVSteps][4];
      for (; n + 1 < t.n_end; ++n) {
        Consumer::pack_p(pa, s[0]);
        PipelineState<kStages> next = st;
        next.advance();
        if (pingpong) async::named_barrier_sync(my_turn, kTurnThreads);
        wait_kv(bars.k_full(next.stage), next.full_parity());
        Consumer::qk_issue(s[0], base, wg_row0, base + uint32_t(kTile.k_offset(next.stage)));
        wait_kv(bars.v_full(st.stage), st.full_parity());
        Consumer::pv_issue_packed(o, pa, base + uint32_t(kTile.v_offset(st.stage)));
        async::named_barrier_arrive(pingpong, other_turn, kTurnThreads);
        float rescale[1][2];
        wgmma::wait_group<1>();
        wgmma::fence_operands(s[0]);
        qk_done(n + 1);
        softmax_only(n + 1, rescale);
        wgmma::wait_group<0>();
        wgmma::fence_operands(o);
        wgmma::fence_operands(pa);
        async::mbarrier_arrive(bars.empty(st.stage));  // the tensor cores are done reading K[n] and V[n]
        rescale_o(rescale);
        st = next;
      }
    }
    for (; n < t.n_end; ++n) {
      if (pingpong) async::named_barrier_sync(my_turn, kTurnThreads);
      wait_kv(bars.v_full(st.stage), st.full_parity());
      Consumer::pv_issue(o, s[0], base + uint32_t(kTile.v_offset(st.stage)));
      Consumer::finish(o);
      async::mbarrier_arrive(bars.empty(st.stage));  // the tensor cores are done reading K[n] and V[n]
      st.advance();
      if (n + 1 < t.n_end) {
        wait_kv(bars.k_full(st.stage), st.full_parity());
        Consumer::qk_issue(s[0], base, wg_row0, base + uint32_t(kTile.k_offset(st.stage)));
        async::named_barrier_arrive(pingpong, other_turn, kTurnThreads);
        Consumer::finish(s[0]);
        qk_done(n + 1);
        softmax_tile(n + 1);
      } else {
        async::named_barrier_arrive(pingpong && consumer == 0, other_turn, kTurnThreads);
      }
    }

    // Epilogue: O / l rounded to T into the warpgroup's rows of the staging tile, then to `out` (rows past
    // the sequence and dims past head_dim are not stored): by the TMA store of one box per panel, issued by
    // the warpgroup's first thread (args.tma_store: dense calls, whose map ends at seqlen_q and head_dim), or
    // as whole 16-byte chunks of rows by every thread. The first sync keeps the writes after the previous
    // work tile's reads of the same rows (its TMA store's: the issuing thread waits for them first).
    const uint32_t epilogue_barrier = kEpilogueBarrier + uint32_t(consumer);
    const bool store_leader = args.tma_store && tid == 0;
    softmax.reduce_sums();
    const float scale[2] = {softmax.out_scale(0, 0, 1.0f), softmax.out_scale(0, 1, 1.0f)};
    if (kTile.o_separate()) {
      if (store_leader) async::bulk_wait_group_read<0>();
      async::named_barrier_sync(epilogue_barrier, kWarpgroupThreads);
    }
    sm80::store_acc<T, QTile>(so, o, warp_row0, 0, scale, lane);
    if (args.tma_store) {
      wgmma::fence_proxy_async();  // this thread's writes of O before the TMA store reads them
      async::named_barrier_sync(epilogue_barrier, kWarpgroupThreads);
      if (store_leader) {
        const uint32_t rows = base + uint32_t(kTile.o_offset()) + uint32_t(wg_row0) * kPanelRowBytes;
#pragma unroll
        for (int pnl = 0; pnl < kTile.panels(); ++pnl)
          async::tma_store_4d(&args.o_map, rows + uint32_t(pnl * kBlockM) * kPanelRowBytes, pnl * int(kPanelCols),
                              int(t.m0) + wg_row0, int(t.h), int(t.b));
        async::bulk_commit_group();
        // O staged in Q's rows: read before Q is released to the next tile's load.
        if (!kTile.o_separate()) async::bulk_wait_group_read<0>();
      }
    } else {
      async::named_barrier_sync(epilogue_barrier, kWarpgroupThreads);
      T* out_tile = static_cast<T*>(p.out.ptr) + p.out.offset(t.b, t.seq.q_start + t.m0 + wg_row0, t.h);
      sm80::store_rows<QTile, kWgmmaRows, kWarpgroupThreads>(out_tile, p.out.row_stride, so, wg_row0,
                                                             t.valid_rows - wg_row0, int(p.head_dim / 8), tid);
    }
    if (!kTile.o_separate()) {
      wgmma::fence_proxy_async();
      release_q();
    }
    if (p.lse.ptr != nullptr && (lane & 3) == 0) {
      float* lse_tile = p.lse.ptr + p.lse.offset(t.b, t.seq.q_start + t.m0, t.h);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + (lane >> 2) + 8 * half;
        if (row < t.valid_rows) lse_tile[row] = softmax.lse(0, half);
      }
    }
    ++tiles_done;
  };
  if constexpr (kPersistent) {
    DynamicTiles dyn{sched_words};
    for (uint32_t tile = blockIdx.x; tile < tiles;) {
      consume(tile);
      tile = args.tile_counter != nullptr ? dyn.next(bars) : tile + gridDim.x;
    }
  } else {
    consume(blockIdx.x);
  }
  // The last TMA stores read shared memory and write `out` after their issue: done before the CTA ends.
  if (args.tma_store && int(threadIdx.x) % kWarpgroupThreads == 0) async::bulk_wait_group<0>();
}

// Launches the forward of one (dtype, head-dim bucket, instance); instantiated in fwd_hdim<D>.cu. A
// persistent grid (args.persistent_ctas) has one CTA per SM (the kernel's shared memory allows no second),
// each looping over work tiles; otherwise one CTA per work tile.
template <typename T, int kHeadDim, bool kGeneral>
void run_fwd(const FwdArgs& args, cudaStream_t stream) {
  constexpr Sm90FwdTile kTile = fwd_tile(kHeadDim);
  const int64_t tiles = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (tiles == 0) return;
  auto kernel = fwd_kernel<T, kHeadDim, kGeneral>;
  allow_dynamic_smem(kernel, size_t(kTile.smem_bytes()), args.p.device.index, "sm90 forward");
  const int64_t grid = fwd_persistent(kHeadDim, kGeneral) && args.persistent_ctas > 0 && args.persistent_ctas < tiles
                           ? args.persistent_ctas
                           : tiles;
  kernel<<<grid_1d(grid, "sm90 forward"), kTile.threads(), kTile.smem_bytes(), stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm90 forward kernel");
}

}  // namespace flashattn::detail::cuda::sm90
