#pragma once

// Tile shapes of the decode attention kernel and the per-call arguments it reads besides the problem.
//
// GQA packing: the queries of one (sequence, kv head) form one matrix of rows = seqlen_q * group rows,
// row r = i * group + g being query token i of head hk * group + g. A block takes kRows of those rows and
// streams the kv head's keys once for all of them. Its warps form a kRowWarps x kKeyWarps grid: row warp
// rw owns rows [16 rw, 16 rw + 16) (one mma.m16n8k16 row tile), key warp kw owns keys
// [kw * kWarpKeys, (kw + 1) * kWarpKeys) of every K/V tile and keeps its own online-softmax state; the
// key warps of a row are merged once, in the epilogue. Four shapes cover the row counts:
//   small  (1 x 4): rows <= 16  (decode with GQA group <= 16): the 4 warps split the keys instead of
//                   idling on padding rows;
//   narrow (2 x 2): rows <= 32  (e.g. 8 query tokens x group 4): every warp reads half of each K/V tile
//                   from shared memory, half as much as 4 row warps would, and no warp computes only
//                   padding rows;
//   medium (4 x 1): rows <= 64;
//   large  (8 x 1): rows <= 128 (e.g. 16 query tokens x group 8); more rows take several row tiles.
// and two shapes that the row count alone does not pick (decode_shape):
//   wide   (1 x 8): rows <= 16 at head dims <= 128, 128-key tiles, one block per SM with the warps of
//                   two small blocks: for the calls that the small shape does not stream at one block
//                   per SM (paged caches with small pages, 5-16 rows), which then get two blocks' loads
//                   and issue slots per SM without splitting their keys.
//   warpgroup (4 x 1, sm_90a): 33 or more rows at head dims <= 128 on an sm_90 device: one warpgroup of
//                   64 rows whose S = Q K^T and O += P V are wgmma instructions (cuda/common/wgmma.cuh),
//                   more rows taking several row tiles. With mma.sync, calls of 64 and 128 rows take time
//                   in proportion to their MMAs, not their bytes (bench/NOTES.md); wgmma
//                   issues the same products at a higher rate and reads K and V from shared memory once
//                   per warpgroup instead of once per warp (1.04-1.40x faster calls on the H200,
//                   bench/NOTES.md). Its tiles are stored in 64-element panels (tile_offset, tile_loader.cuh), the
//                   layout wgmma's 128-byte swizzle reads.
// This header is plain C++: the host reads the same constants to size shared memory and workspaces.

#include <cstddef>
#include <cstdint>

#include "cuda/attn/fast_divmod.h"

namespace flashattn::detail::cuda::decode {

using attn::FastDivmod;  // attn/fast_divmod.h, shared with the sm80 forward
using attn::make_fast_divmod;

enum class RowShape { small, narrow, medium, large, wide, warpgroup };

// The shape for `rows` packed query rows.
constexpr RowShape row_shape(int64_t rows) {
  return rows <= 16 ? RowShape::small : rows <= 32 ? RowShape::narrow : rows <= 64 ? RowShape::medium : RowShape::large;
}

constexpr int row_warps(RowShape s) {
  return s == RowShape::small || s == RowShape::wide         ? 1
         : s == RowShape::narrow                             ? 2
         : s == RowShape::medium || s == RowShape::warpgroup ? 4
                                                             : 8;
}
constexpr int key_warps(RowShape s) {
  return s == RowShape::small ? 4 : s == RowShape::wide ? 8 : s == RowShape::narrow ? 2 : 1;
}

// The decode kernels are instantiated for three head dims, coarser than the tiled kernels' buckets of 32
// (attn/head_dim.h): a call's head dim is padded to the next of them (zero-filled, never stored).
constexpr int decode_head_dim(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

// kFp8Cache: the cache holds float8 e4m3 (one byte per element) beside 16-bit q and out. Its tiles are
// copied as bytes into a ring of stages (row-major, kHeadDim bytes a row) and, once a tile has landed,
// converted by the whole block into one 16-bit K/V tile in the layout the products read: the math is the
// 16-bit kernel's, the copies half its bytes.
template <int kHeadDim_, int kRowWarps_, int kKeyWarps_, bool kWgmma_ = false, bool kFp8Cache_ = false>
struct DecodeTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kRowWarps = kRowWarps_;
  static constexpr int kKeyWarps = kKeyWarps_;
  // The warpgroup shape: wgmma products, tiles in 64-element panels (tile_loader.cuh, tile_offset).
  static constexpr bool kWgmma = kWgmma_;
  static constexpr bool kFp8Cache = kFp8Cache_;
  static constexpr int kWarps = kRowWarps * kKeyWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kRowWarps;
  // Keys per K/V tile: 64, except 32 for head dim 256 when one or two warps cover the whole tile (a
  // warp's S fragment then holds at most 16 floats next to a 128-float accumulator: no spills).
  // 128 with 8 key warps (the wide shape: 16 keys per warp, one P V k-step).
  static constexpr int kBlockN = kKeyWarps == 8 ? 128 : (kHeadDim == 256 && kKeyWarps <= 2) ? 32 : 64;
  static constexpr int kWarpKeys = kBlockN / kKeyWarps;
  static constexpr int kChunks = kHeadDim / 8;           // 16-byte chunks of a 16-bit row
  static constexpr int kTileElems = kBlockN * kHeadDim;  // one K or one V tile
  static constexpr int kTileBytes = 2 * kTileElems * 2;  // K + V, 16-bit elements
  // The cache's element size, and the 16-byte chunks of one cache row (what the K/V copies move).
  static constexpr int kCacheElemBytes = kFp8Cache ? 1 : 2;
  static constexpr int kCacheChunks = kHeadDim * kCacheElemBytes / 16;
  // One stage of the ring: K + V as stored in the cache.
  static constexpr int kStageBytes = 2 * kTileElems * kCacheElemBytes;
  // The 16-bit K/V tile an FP8 stage is converted into (none for a 16-bit cache: the stages are read).
  static constexpr int kWorkBytes = kFp8Cache ? kTileBytes : 0;
  // Pipeline depth: about 96 KB of K/V per block (3 stages at head dim 128, kStages - 1 tiles in flight
  // while one is consumed), so that two blocks share an SM and one streams while the other waits at a
  // barrier. A compile-time constant: a depth chosen per device at run time (deeper where one block has
  // the SM to itself) measured 0-6% slower on the H200 at the bandwidth-bound shapes (bench/NOTES.md).
  // The wide shape runs alone on its SM and keeps 3 stages (two 128-key tiles in flight, what two small
  // blocks of 3 stages keep).
  // An FP8 cache keeps the same ~96 KB per block, its 16-bit work tile included, in stages of half the
  // bytes (as many keys in flight); the wide shape keeps 3 stages (164 KB with the work tile at D = 128).
  static constexpr int kRingBudget = 98304 - kWorkBytes;
  static constexpr int kStages = kKeyWarps == 8                  ? 3
                                 : kRingBudget / kStageBytes < 2 ? 2
                                 : kRingBudget / kStageBytes > 4 ? 4
                                                                 : kRingBudget / kStageBytes;
  static constexpr int kQElems = kRows * kHeadDim;
  static constexpr size_t kQBytes = size_t(kQElems) * 2;
  // Epilogue staging (overlays Q and K/V once the main loop is done): per key warp, the unnormalised
  // output rows in fp32 with a row stride padded by 8 floats (float2 stores of a warp spread over all
  // banks), then the running max and sum of every row.
  static constexpr int kOStride = kHeadDim + 8;
  static constexpr size_t kStageOBytes = size_t(kKeyWarps) * kRows * kOStride * 4;
  static constexpr size_t kStatBytes = size_t(kKeyWarps) * kRows * 4;  // one of m, l
  static constexpr size_t kEpilogueBytes = kStageOBytes + 2 * kStatBytes;

  // Blocks that share an SM (H100/H200: 228 KB of shared memory per SM, 1 KB of it
  // reserved per block), passed to __launch_bounds__ so that registers do not cut that occupancy; but no
  // more than leave every thread 160 of the SM's 64K registers (below that the 8-warp tiles spill).
  static constexpr size_t kMainBytes = kQBytes + size_t(kStages) * kStageBytes + size_t(kWorkBytes);
  static constexpr int kSmemBlocksPerSm = int(233472 / (kMainBytes + 1024));
  static constexpr int kRegBlocksPerSm = 65536 / (kThreads * 160);
  static constexpr int kBlocksPerSm = kSmemBlocksPerSm < kRegBlocksPerSm ? kSmemBlocksPerSm : kRegBlocksPerSm;
  static constexpr int kMinBlocksPerSm = kBlocksPerSm < 1 ? 1 : kBlocksPerSm;

  static constexpr size_t kSmemBytes = kMainBytes > kEpilogueBytes ? kMainBytes : kEpilogueBytes;

  static_assert(kWarpKeys % 16 == 0, "a key warp takes whole k-steps (16 keys) of the P.V product");
  static_assert(kChunks % 8 == 0, "the XOR swizzle permutes groups of 8 chunks (head dim >= 64)");
  static_assert(kThreads % kChunks == 0 && kBlockN % (kThreads / kChunks) == 0,
                "the tile loader covers whole rows and the tile in whole passes");
  static_assert(kThreads % kCacheChunks == 0 && kBlockN % (kThreads / kCacheChunks) == 0,
                "the K/V copies cover whole cache rows and the tile in whole passes");
  static_assert(kHeadDim % 16 == 0, "k-steps of 16 dims");
  static_assert(!kWgmma || (kRowWarps == 4 && kKeyWarps == 1 && kBlockN == 64 && kHeadDim <= 128),
                "one warpgroup of 64 rows, m64n64 for S and m64n(head dim) for O");
  static_assert(!kWgmma || (kQBytes % 1024 == 0 && kTileElems * 2 % 1024 == 0 && kStageBytes % 1024 == 0),
                "wgmma's swizzle atoms: every tile starts 1024-byte aligned in the kernel's shared memory");
};

// The warpgroup shape's tile; it exists at head dims <= 128 only.
template <int kHeadDim, bool kFp8Cache = false>
using WarpgroupTile = DecodeTile<kHeadDim, 4, 1, true, kFp8Cache>;
template <int kHeadDim, bool kFp8Cache>
constexpr size_t warpgroup_smem_bytes() {
  if constexpr (kHeadDim <= 128) {
    return WarpgroupTile<kHeadDim, kFp8Cache>::kSmemBytes;
  } else {
    return 0;
  }
}

// Shared memory of the kernel for a head-dim bucket and row shape (host side: supports and launch).
template <int kHeadDim, bool kFp8Cache>
constexpr size_t decode_smem_bytes(RowShape s) {
  return s == RowShape::small    ? DecodeTile<kHeadDim, 1, 4, false, kFp8Cache>::kSmemBytes
         : s == RowShape::narrow ? DecodeTile<kHeadDim, 2, 2, false, kFp8Cache>::kSmemBytes
         : s == RowShape::medium ? DecodeTile<kHeadDim, 4, 1, false, kFp8Cache>::kSmemBytes
         : s == RowShape::large  ? DecodeTile<kHeadDim, 8, 1, false, kFp8Cache>::kSmemBytes
         : s == RowShape::wide   ? DecodeTile<kHeadDim, 1, 8, false, kFp8Cache>::kSmemBytes
                                 : warpgroup_smem_bytes<kHeadDim, kFp8Cache>();
}

template <bool kFp8Cache>
constexpr size_t decode_smem_bytes(int bucket, RowShape s) {
  return bucket == 64    ? decode_smem_bytes<64, kFp8Cache>(s)
         : bucket == 128 ? decode_smem_bytes<128, kFp8Cache>(s)
                         : decode_smem_bytes<256, kFp8Cache>(s);
}
constexpr size_t decode_smem_bytes(int bucket, RowShape s, bool fp8_cache = false) {
  return fp8_cache ? decode_smem_bytes<true>(bucket, s) : decode_smem_bytes<false>(bucket, s);
}

// The shape of a call: row_shape(rows), except that up to 16 rows at head dims <= 128 take the wide
// shape where the small one would not stream at one block per SM (`small_streams`: at most one row per
// warp from a contiguous cache or large pages, split_heuristic.h) and the wide one's shared memory fits
// the device (`smem_limit`, the per-block opt-in: an A100's 163 KB holds it at head dim 64 only). Wide
// at head dim 256 would need 3 x 128 KB tiles. Measured on the H200 against the small shape
// (bench/NOTES.md): page 16 1.02-1.06x except batch 64 x 4k (0.98x), group 8 1.03-1.22x,
// but contiguous group-4 calls 0.985-0.999x, which keep the small shape.
//
// `wgmma`: the device runs the library's sm_90a kernels; then more than 32 rows at head dims <= 128 take
// the warpgroup shape.
constexpr RowShape decode_shape(int64_t rows, int bucket, size_t smem_limit, bool small_streams, bool wgmma = false,
                                bool fp8_cache = false) {
  const RowShape s = row_shape(rows);
  if (wgmma && rows > 32 && bucket <= 128) return RowShape::warpgroup;
  if (s == RowShape::small && !small_streams && bucket <= 128 &&
      decode_smem_bytes(bucket, RowShape::wide, fp8_cache) <= smem_limit)
    return RowShape::wide;
  return s;
}

// The most splits of one (sequence, kv head): bounds the combine kernel's per-warp weight table.
inline constexpr int kMaxSplits = 128;

// Per-call arguments of the attention and combine kernels, built on the host.
struct DecodeArgs {
  int group = 1;            // query heads per kv head
  int rows = 0;             // packed query rows per kv head: seqlen_q * group
  int row_tiles = 1;        // ceil(rows / kRows)
  int num_splits = 1;       // splits of the key range; 1 writes out/LSE directly
  float scale_log2 = 0.0f;  // softmax_scale * log2(e): logits in base-2 units when no score mod is on
  bool score_mod = false;   // softcap or ALiBi: logits go through common/score.h's ScoreMod
  FastDivmod page;          // page_size of a paged cache
  // Split partials (num_splits > 1): out normalised per split, fp32 (num_splits, B, Hk, rows, head_dim),
  // and the split's natural-log LSE (num_splits, B, Hk, rows); -inf for a split with no visible key.
  float* part_out = nullptr;
  float* part_lse = nullptr;
  // The append kernel ran before this call's attention, which was launched with programmatic dependent
  // launch (cuda/common/pdl.cuh): wait for it before reading q (its rotated copy) or the cache.
  bool wait_for_inputs = false;
};

}  // namespace flashattn::detail::cuda::decode
