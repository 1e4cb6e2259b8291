// cuda_sm80 (tensor-core FlashAttention-2). Two parts:
//  * host checks of the index derivations the kernels rely on (swizzled shared-memory layout, ldmatrix
//    lane addresses, tile ranges from the mask, the dropout lane exchange): these run everywhere;
//  * GPU checks against the fp64 reference: tile-boundary sweeps per head-dim bucket, deterministic
//    backward repeatability, dropout, a larger problem and a non-default stream (skipped without a GPU).
// The shared catalogue (test_backend_forward/backward.cpp) covers every feature on this backend as well.

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention_case.h"
#include "backend_match.h"
#include "common/philox.h"
#include "common/score.h"
#include "criterion.h"
#include "cuda/attn/dropout_lanes.h"
#include "cuda/attn/tile_order.h"
#include "cuda/attn/tile_range.h"
#include "cuda/common/alignment.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/smem_layout.h"
#include "gpu_test.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "api/validate.h"
#include "cuda/sm80/launch.h"
#endif

namespace fa_test {
namespace {

namespace sm80 = flashattn::detail::cuda::sm80;
using flashattn::detail::DropoutParams;
using flashattn::detail::Mask;

// ---------------------------------------------------------------------------------------------------
// The 16-byte alignment check every CUDA backend uses (cuda/common/alignment.h)

TEST(CudaAlignment, PointerAndEveryCheckedStrideMustBe16Bytes) {
  namespace cuda = flashattn::detail::cuda;
  alignas(16) static unsigned char buf[64];
  flashattn::detail::RowsView v{buf, 64, 16, 8};  // elements of 2 bytes: 128, 32, 16 bytes
  EXPECT_EQ(cuda::unaligned16_reason("q", v, 2), "");
  EXPECT_TRUE(cuda::rows_aligned16(v, 2));
  v.ptr = buf + 8;
  EXPECT_EQ(cuda::unaligned16_reason("q", v, 2),
            "q: data pointer not 16-byte aligned (the kernels load 16-byte chunks)");
  v.ptr = buf;
  v.row_stride = 12;
  EXPECT_EQ(cuda::unaligned16_reason("k", v, 2), "k: row stride 12 is not a multiple of 8 elements (16 bytes)");
  EXPECT_FALSE(cuda::rows_aligned16(v, 2));
  EXPECT_TRUE(cuda::rows_aligned16(v, 4));  // 48 bytes with 4-byte elements
  // A dimension of extent 1 is never stepped through when the caller says so.
  EXPECT_EQ(cuda::unaligned16_reason("k", buf, 2, {{"row", 12, 1}, {"head", 8, 4}}), "");
  EXPECT_EQ(cuda::unaligned16_reason("k", buf, 2, {{"row", 12, 2}}),
            "k: row stride 12 is not a multiple of 8 elements (16 bytes)");
}

// ---------------------------------------------------------------------------------------------------
// Shared-memory layout

template <typename Tile, sm80::LanePattern kPattern>
void check_lane_addresses() {
  for (int lane = 0; lane < 32; ++lane) {
    const sm80::Ldsm<Tile, kPattern> L(lane);
    const bool rows16 = kPattern == sm80::LanePattern::kRows16;
    const int r = rows16 ? lane % 16 : lane % 8 + 8 * (lane / 16);
    const int h = rows16 ? lane / 16 : (lane / 8) % 2;
    for (int r0 = 0; r0 + 16 <= Tile::kRows; r0 += 16)
      for (int c0 = 0; c0 + 16 <= Tile::kCols; c0 += 16)
        ASSERT_EQ(L.addr(1024, r0, c0), 1024u + 2u * uint32_t(Tile::chunk_offset(r0 + r, c0 / 8 + h)))
            << "lane " << lane << " r0 " << r0 << " c0 " << c0;
  }
}

template <int kRows, int kCols>
void check_tile() {
  using Tile = sm80::SmemTile<kRows, kCols>;
  SCOPED_TRACE("tile " + std::to_string(kRows) + " x " + std::to_string(kCols));
  // A bijection from (row, chunk) to 16-byte slots of the tile.
  std::vector<int> hits(Tile::kElems / 8, 0);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < Tile::kChunksPerRow; ++c) {
      const int off = Tile::chunk_offset(r, c);
      ASSERT_EQ(off % 8, 0);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, Tile::kElems);
      ++hits[off / 8];
    }
  for (int n : hits) ASSERT_EQ(n, 1);
  // ldmatrix phases: the same chunk of 8 rows starting at a multiple of 8 hits 8 different bank groups.
  for (int r0 = 0; r0 < kRows; r0 += 8)
    for (int c = 0; c < Tile::kChunksPerRow; ++c) {
      std::set<int> groups;
      for (int r = r0; r < r0 + 8; ++r) groups.insert((Tile::chunk_offset(r, c) * 2 / 16) % 8);
      ASSERT_EQ(groups.size(), 8u) << "rows " << r0 << ".. chunk " << c;
    }
  // Accumulator stores (fragments.cuh store_acc): lanes (g, t) write 4 bytes at (r0 + g, 8 j + 2 t): 32
  // different banks.
  for (int r0 = 0; r0 < kRows; r0 += 16)
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < Tile::kChunksPerRow; ++j) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane)
          banks.insert((Tile::offset(r0 + lane / 4 + 8 * half, 8 * j + 2 * (lane % 4)) * 2 / 4) % 32);
        ASSERT_EQ(banks.size(), 32u);
      }
  check_lane_addresses<Tile, sm80::LanePattern::kRows16>();
  check_lane_addresses<Tile, sm80::LanePattern::kRows8x2>();
}

TEST(CudaSm80Layout, SwizzledTilesAreBijectiveConflictFreeAndLaneAddressesMatch) {
  check_tile<16, 32>();
  check_tile<64, 32>();
  check_tile<128, 64>();
  check_tile<64, 96>();
  check_tile<64, 192>();
  check_tile<128, 128>();
  check_tile<64, 160>();
  check_tile<128, 192>();
  check_tile<32, 224>();
  check_tile<64, 256>();
  check_tile<64, 128>();  // tiled backward: Q, dO, P, dS at head dim 128
  check_tile<128, 32>();  // tiled backward: Q, dO at head dim 32
}

TEST(CudaSm80Layout, TileConfigurationsFitSm80) {
  for (int d : sm80::kHeadDimBuckets) {
    EXPECT_TRUE(sm80::valid(sm80::fwd_tile(d, true))) << d;
    EXPECT_TRUE(sm80::valid(sm80::fwd_tile(d, false))) << d;
    EXPECT_TRUE(sm80::valid(sm80::fwd_tile(d, false, true))) << d;
    EXPECT_TRUE(sm80::valid(sm80::bwd_tile(d))) << d;
    EXPECT_TRUE(sm80::valid(sm80::dq_tile(d))) << d;
    // The tiled backward runs everywhere on sm_90; on sm_80 only where it fits, else keys as rows.
    EXPECT_TRUE(sm80::bwd_tile_for(d, sm80::kSm90SmemBytes).tiled) << d;
    const sm80::BwdTile on_sm80 = sm80::bwd_tile_for(d, sm80::kSm80SmemBytes);
    EXPECT_LE(on_sm80.smem_bytes(), sm80::kSm80SmemBytes) << d;
    EXPECT_TRUE(sm80::valid(on_sm80)) << d;
    EXPECT_EQ(on_sm80.tiled, d < 224) << d;
    EXPECT_EQ(sm80::head_dim_bucket(d), d);
    EXPECT_EQ(sm80::head_dim_bucket(d - 8), d);
    // The forward runs every head dim where CTAs may opt into 99 KB (sm_86/89): a feature-free call
    // whose tile does not fit takes the general instance's; on sm_80 and sm_90 feature-free calls keep
    // their own tile.
    constexpr int64_t kSm86SmemBytes = 99 * 1024;
    EXPECT_LE(sm80::fwd_tile(d, sm80::fwd_general(false, d, kSm86SmemBytes)).smem_bytes(), kSm86SmemBytes) << d;
    EXPECT_LE(sm80::fwd_tile(d, true).smem_bytes(), kSm86SmemBytes) << d;
    EXPECT_FALSE(sm80::fwd_general(false, d, sm80::kSm80SmemBytes)) << d;
    EXPECT_FALSE(sm80::fwd_general(false, d, sm80::kSm90SmemBytes)) << d;
    EXPECT_TRUE(sm80::fwd_general(true, d, sm80::kSm90SmemBytes)) << d;
  }
  EXPECT_EQ(sm80::head_dim_bucket(8), 32);
}

// The paired forward tile: half the rows and warps of the wide one with the same warp tile, chosen only
// for the feature-free kernel of D >= 160 on sm_90+ devices that hold two of its CTAs per SM.
TEST(CudaSm80Layout, PairedForwardTileRule) {
  constexpr int64_t kSm90PerSm = 228 * 1024, kSm80PerSm = 164 * 1024;
  for (int d : sm80::kHeadDimBuckets) {
    const bool has = d >= 160;
    EXPECT_EQ(sm80::has_paired_fwd(d, false), has) << d;
    EXPECT_FALSE(sm80::has_paired_fwd(d, true)) << d;
    EXPECT_EQ(sm80::use_paired_fwd(d, false, 9, kSm90PerSm), has) << d;
    EXPECT_FALSE(sm80::use_paired_fwd(d, true, 9, kSm90PerSm)) << d;
    EXPECT_FALSE(sm80::use_paired_fwd(d, false, 8, kSm80PerSm)) << d;
    EXPECT_FALSE(sm80::use_paired_fwd(d, false, 9, 2 * sm80::fwd_tile(d, false, true).smem_bytes())) << d;
    if (!has) {
      EXPECT_EQ(sm80::fwd_tile(d, false, true).block_m, sm80::fwd_tile(d, false).block_m) << d;
      continue;
    }
    const sm80::FwdTile wide = sm80::fwd_tile(d, false), paired = sm80::fwd_tile(d, false, true);
    EXPECT_EQ(paired.block_m * 2, wide.block_m) << d;
    EXPECT_EQ(paired.warps * 2, wide.warps) << d;
    EXPECT_EQ(paired.warp_rows(), wide.warp_rows()) << d;
    EXPECT_EQ(paired.block_n, wide.block_n) << d;
  }
}

// dq_accum's blocked layout (args.h): every (row, head, dim) of the buffer has its own slot inside
// dq_accum_elems, and the 8-byte atomics of one warp for a fragment half (lane 4 g + t adds dims 2 t, 2 t + 1
// of row g) cover one contiguous 256-byte block when the rows start at a multiple of 8, two contiguous
// runs otherwise.
TEST(CudaSm80Layout, DqAccumBlocksAreBijectiveAndOneAtomicIsContiguous) {
  for (int64_t heads : {1, 3})
    for (int64_t head_dim : {8, 24, 64})
      for (int64_t rows : {1, 13, 16}) {
        SCOPED_TRACE(std::to_string(heads) + " heads, head dim " + std::to_string(head_dim) + ", " +
                     std::to_string(rows) + " rows");
        const int64_t elems = sm80::dq_accum_elems(rows, heads, head_dim);
        std::set<int64_t> seen;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t d = 0; d < head_dim; ++d) {
              const int64_t o = sm80::dq_accum_offset(r, h, d, heads, head_dim);
              ASSERT_GE(o, 0);
              ASSERT_LT(o, elems);
              ASSERT_TRUE(seen.insert(o).second) << r << " " << h << " " << d;
            }
      }
  const int64_t heads = 3, head_dim = 40;
  for (int64_t row0 : {0, 8, 5, 13})
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d0 = 0; d0 < head_dim; d0 += 8) {
        int runs = 0;
        int64_t prev = -10;
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t o = sm80::dq_accum_offset(row0 + lane / 4, h, d0 + 2 * (lane % 4), heads, head_dim);
          EXPECT_EQ(o % 2, 0);
          EXPECT_EQ(sm80::dq_accum_offset(row0 + lane / 4, h, d0 + 2 * (lane % 4) + 1, heads, head_dim), o + 1);
          if (o != prev + 2) ++runs;
          prev = o;
        }
        EXPECT_EQ(runs, row0 % 8 == 0 ? 1 : 2) << row0 << " " << h << " " << d0;
      }
}

// The tiled backward's warp grids (kernel_traits.h, BwdTile::*_origin): in each of its three phases the
// warps' tiles cover the phase's (rows x cols) tile exactly once, in whole 16 x 16 MMA blocks.
void check_warp_grid(const sm80::BwdTile& t, int rows, int cols, int tile_rows, int tile_cols,
                     sm80::BwdTile::Origin (sm80::BwdTile::*origin)(int) const, const char* phase) {
  SCOPED_TRACE(std::string(phase) + " of head dim " + std::to_string(t.head_dim));
  ASSERT_EQ(tile_rows % 16, 0);
  ASSERT_EQ(tile_cols % 16, 0);
  std::vector<int> hits(size_t(rows) * cols, 0);
  for (int w = 0; w < t.warps; ++w) {
    const sm80::BwdTile::Origin o = (t.*origin)(w);
    ASSERT_EQ(o.row % 16, 0);
    ASSERT_EQ(o.col % 16, 0);
    for (int r = o.row; r < o.row + tile_rows; ++r)
      for (int c = o.col; c < o.col + tile_cols; ++c) {
        ASSERT_TRUE(r < rows && c < cols) << "warp " << w << " leaves the tile at " << r << "," << c;
        ++hits[size_t(r) * cols + c];
      }
  }
  for (int n : hits) ASSERT_EQ(n, 1);
}

TEST(CudaSm80Layout, TiledBackwardWarpGridsPartitionEveryPhase) {
  for (int d : sm80::kHeadDimBuckets) {
    const sm80::BwdTile t = sm80::bwd_tile(d);
    if (!t.tiled) continue;
    check_warp_grid(t, t.block_m, t.block_n, t.sdp_tile_rows(), t.sdp_tile_cols(), &sm80::BwdTile::sdp_origin, "S/dP");
    check_warp_grid(t, t.block_n, t.head_dim, t.dkv_tile_rows(), t.dkv_tile_cols(), &sm80::BwdTile::dkv_origin,
                    "dK/dV");
    check_warp_grid(t, t.block_m, t.head_dim, t.dq_tile_rows(), t.dq_tile_cols(), &sm80::BwdTile::dq_origin, "dQ");
    // LSE and D of a step are loaded by one thread per value (tid < block_m and tid - block_m).
    EXPECT_LE(2 * t.block_m, t.threads());
  }
}

// ---------------------------------------------------------------------------------------------------
// Tile ranges (tile_range.h) against Mask::visible

TEST(CudaSm80TileRange, RangesAndFullVisibilityMatchTheMask) {
  const int64_t lens[] = {0, 1, 5, 17, 40};
  const int64_t windows[] = {-1, 0, 3, 12};
  for (int64_t sq : lens)
    for (int64_t sk : lens)
      for (int64_t wl : windows)
        for (int64_t wr : windows) {
          const Mask m{sq, sk, wl, wr};
          SCOPED_TRACE("sq " + std::to_string(sq) + " sk " + std::to_string(sk) + " window " + std::to_string(wl) +
                       "," + std::to_string(wr));
          for (int64_t r0 = 0; r0 < sq; r0 += 3)
            for (int64_t r1 = r0; r1 < sq; r1 += 4) {
              const sm80::Range keys = sm80::keys_for_rows(m, r0, r1);
              for (int64_t i = r0; i <= r1; ++i)
                for (int64_t j = 0; j < sk; ++j)
                  if (m.visible(i, j)) {
                    ASSERT_TRUE(j >= keys.begin && j < keys.end) << i << "," << j;
                  }
              for (int64_t k0 = 0; k0 < sk + 2; k0 += 2)
                for (int64_t k1 = k0; k1 < sk + 3; k1 += 3) {
                  bool all = true;
                  for (int64_t i = r0; i <= r1; ++i)
                    for (int64_t j = k0; j <= k1; ++j) all = all && m.visible(i, j);
                  ASSERT_EQ(sm80::tile_fully_visible(m, r0, r1, k0, k1), all)
                      << r0 << ".." << r1 << " x " << k0 << ".." << k1;
                }
            }
          for (int64_t k0 = 0; k0 < sk; k0 += 2)
            for (int64_t k1 = k0; k1 < sk; k1 += 3) {
              const sm80::Range rows = sm80::rows_for_keys(m, k0, k1);
              ASSERT_GE(rows.begin, 0);
              ASSERT_LE(rows.end, sq);
              for (int64_t i = 0; i < sq; ++i)
                for (int64_t j = k0; j <= k1; ++j)
                  if (m.visible(i, j)) {
                    ASSERT_TRUE(i >= rows.begin && i < rows.end) << i << "," << j;
                  }
            }
        }
}

// ---------------------------------------------------------------------------------------------------
// Dropout lane exchange (dropout.cuh) replayed on the host for one warp

// The forward's tile order (tile_order.h) is a permutation of (query tile, (sequence, head)): the heavy
// part in groups of heads, each heaviest query tile first, then the light tail of every head, heaviest
// first; the default order is per head, heavy first.
TEST(CudaSm80TileOrder, MaskedOrderIsAPermutationWithGroupsThenALightTail) {
  const auto check = [](const sm80::TileOrder& o) {
    SCOPED_TRACE(std::to_string(o.m_blocks) + " query tiles, " + std::to_string(o.head_seqs) + " heads, groups of " +
                 std::to_string(o.group) + " (+1 in " + std::to_string(o.extra) + "), light below " +
                 std::to_string(o.light_m));
    std::set<std::pair<int, int>> seen;
    int prev_m = o.m_blocks;
    for (int t = 0; t < o.m_blocks * o.head_seqs; ++t) {
      const sm80::TileCoord c = sm80::tile_coord(t, o);
      ASSERT_GE(c.m_block, 0);
      ASSERT_LT(c.m_block, o.m_blocks);
      ASSERT_GE(c.head_seq, 0);
      ASSERT_LT(c.head_seq, o.head_seqs);
      EXPECT_TRUE(seen.emplace(c.m_block, c.head_seq).second) << "tile " << t << " repeats";
      const bool light = c.m_block < o.light_m;
      EXPECT_EQ(light, t >= (o.m_blocks - o.light_m) * o.head_seqs) << "tile " << t;
      if (light && t > (o.m_blocks - o.light_m) * o.head_seqs) EXPECT_LE(c.m_block, prev_m) << "tile " << t;
      prev_m = c.m_block;
    }
    EXPECT_EQ(int(seen.size()), o.m_blocks * o.head_seqs);
  };
  for (int m_blocks : {1, 3, 8, 64}) {
    for (int head_seqs : {1, 5, 12, 64}) {
      sm80::TileOrder per_head;
      per_head.m_blocks = m_blocks, per_head.head_seqs = head_seqs;
      check(per_head);
      for (int t = 0; t < m_blocks * head_seqs; ++t) {
        const sm80::TileCoord c = sm80::tile_coord(t, per_head);
        EXPECT_EQ(c.head_seq, t / m_blocks);
        EXPECT_EQ(c.m_block, m_blocks - 1 - t % m_blocks);
      }
      for (int64_t kv_bytes : {int64_t(1) << 18, int64_t(1) << 22, int64_t(1) << 26})
        for (int64_t slots : {8, 264})
          check(sm80::masked_tile_order(m_blocks, head_seqs, kv_bytes, 1, 50 << 20, slots));
    }
  }
  // Groups hold as many heads as keep their K and V within half the L2, in groups of equal size; the tail
  // is about two waves of the lightest tiles, and at least one query tile stays in the heavy part.
  const sm80::TileOrder o = sm80::masked_tile_order(128, 16, int64_t(8) << 20, 1, 60 << 20, 264);
  EXPECT_EQ(o.group, 2);  // 3 heads fit in 30 MB: 16 heads in 6 groups, 4 of 3 and 2 of 2
  EXPECT_EQ(o.extra, 4);
  EXPECT_GT(o.light_m, 0);
  EXPECT_LT(o.light_m, 128);
  EXPECT_EQ(sm80::masked_tile_order(4, 2, 1 << 20, 1, 60 << 20, 264).light_m, 3);
}

TEST(CudaSm80Dropout, LaneExchangeReproducesThePhiloxKeepMask) {
  const DropoutParams d{0.5f, 0x9E3779B97F4A7C15ull, 11};
  const uint32_t threshold = flashattn::detail::dropout_threshold(d.p);
  const int64_t heads = 3;
  for (int64_t b : {0, 2})
    for (int64_t h : {0, 1})
      for (int64_t base0 : {0, 16, 48})
        for (int64_t base1 : {0, 16, 64}) {
          uint32_t drawn[32];
          // Row-major: rows base0 + g (+ 8), keys base1 + 8 + 2t (+ 1); exchange with lane ^ 1.
          const int64_t key0 = base1 + 8;
          for (int lane = 0; lane < 32; ++lane) {
            const sm80::DropoutDraw w = sm80::dropout_draw_rowmajor(lane);
            drawn[lane] =
                sm80::keep_nibble(flashattn::detail::dropout_words(d, b, h, heads, base0 + w.query, key0 + w.key),
                                  threshold)
                << w.shift;
          }
          for (int lane = 0; lane < 32; ++lane) {
            const uint32_t bits = drawn[lane] | drawn[lane ^ 1];
            for (int e = 0; e < 4; ++e) {
              const int64_t row = base0 + lane / 4 + 8 * (e / 2), key = key0 + 2 * (lane % 4) + e % 2;
              ASSERT_EQ(bool((bits >> sm80::dropout_bit_rowmajor(e, lane)) & 1),
                        flashattn::detail::dropout_keep(d, b, h, heads, row, key))
                  << "row-major lane " << lane << " e " << e;
            }
          }
          // Transposed: keys base1 + g (+ 8), queries base0 + 8 + 2t (+ 1); exchange with lane ^ 4, ^ 8.
          const int64_t q0 = base0 + 8;
          for (int lane = 0; lane < 32; ++lane) {
            const sm80::DropoutDraw w = sm80::dropout_draw_transposed(lane);
            drawn[lane] = sm80::keep_nibble(
                              flashattn::detail::dropout_words(d, b, h, heads, q0 + w.query, base1 + w.key), threshold)
                          << w.shift;
          }
          for (int lane = 0; lane < 32; ++lane) {
            const uint32_t bits = drawn[lane] | drawn[lane ^ 4] | drawn[lane ^ 8] | drawn[lane ^ 12];
            for (int e = 0; e < 4; ++e) {
              const int64_t key = base1 + lane / 4 + 8 * (e / 2), query = q0 + 2 * (lane % 4) + e % 2;
              ASSERT_EQ(bool((bits >> sm80::dropout_bit_transposed(e, lane)) & 1),
                        flashattn::detail::dropout_keep(d, b, h, heads, query, key))
                  << "transposed lane " << lane << " e " << e;
            }
          }
        }
}

// ---------------------------------------------------------------------------------------------------
// GPU: the backend against the reference

constexpr const char* kBackend = "cuda_sm80";

void expect_forward_matches(const AttnConfig& cfg, uint64_t seed) { expect_forward_matches_on(kBackend, cfg, seed); }
void expect_backward_matches(const AttnConfig& cfg, uint64_t seed, bool deterministic) {
  expect_backward_matches_on(kBackend, cfg, seed, deterministic);
}

AttnConfig small_config(int bucket, int64_t sq, int64_t sk, bool causal) {
  return bucket_config(bucket, sq, sk, causal, bucket % 64 == 0 ? DType::bf16 : DType::f16);
}

class CudaSm80Buckets : public testing::TestWithParam<int> {};

// Query and key counts one below, at and one above the forward tile sizes of the bucket, for both kernel
// instances (their tiles differ): a softcap selects the general one (args.h).
TEST_P(CudaSm80Buckets, ForwardAtTileBoundaries) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  const int bucket = GetParam();
  uint64_t seed = 100;
  // The feature-free kernel runs the paired tile on devices that hold two (the H200): the boundaries of
  // both shapes are probed, whichever the device picks.
  for (const auto& [tile, general] :
       {std::pair{sm80::fwd_tile(bucket, false), false}, std::pair{sm80::fwd_tile(bucket, false, true), false},
        std::pair{sm80::fwd_tile(bucket, true), true}}) {
    for (int dm : {-1, 0, 1})
      for (int dn : {-1, 0, 1})
        for (bool causal : {false, true}) {
          AttnConfig c = small_config(bucket, tile.block_m + dm, tile.block_n + dn, causal);
          if (general) c.softcap = 20.0f;
          expect_forward_matches(c, ++seed);
        }
  }
}

// Key counts around the backward CTA tile, query counts around its query step (one below: a partial
// step; one above: a full step then a one-row step) and the dQ kernel's tile, with the atomic and the
// deterministic dQ.
TEST_P(CudaSm80Buckets, BackwardAtTileBoundaries) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  const int bucket = GetParam();
  const sm80::BwdTile tile = sm80::bwd_tile(bucket);
  const int dq_rows = sm80::dq_tile(bucket).block_m;
  uint64_t seed = 200;
  for (int dn : {-1, 0, 1})
    for (int64_t sq : {int64_t(tile.block_m) - 1, int64_t(tile.block_m) + 1, int64_t(dq_rows) + 1})
      for (bool causal : {false, true})
        for (bool deterministic : {false, true})
          expect_backward_matches(small_config(bucket, sq, tile.block_n + dn, causal), ++seed, deterministic);
}

#if defined(FLASHATTN_WITH_CUDA)
// Head dims 224 and 256 fall back to the keys-as-rows backward on devices that cannot give the tiled
// kernel its 185-209 KB of shared memory (sm_80). An sm_90 device runs the tiled kernel, so the test
// drives launch_bwd with sm_80's limit: the fallback is checked on whatever GPU runs the suite.
TEST(CudaSm80, RowsFallbackBackwardMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  uint64_t seed = 300;
  for (int bucket : {224, 256}) {
    ASSERT_TRUE(sm80::has_rows_fallback(bucket));
    ASSERT_FALSE(sm80::bwd_tile_for(bucket, sm80::kSm80SmemBytes).tiled);
    const sm80::BwdTile tile = sm80::bwd_rows_tile(bucket);
    for (bool causal : {false, true})
      for (bool deterministic : {false, true}) {
        const AttnConfig c = small_config(bucket, tile.block_m + 1, tile.block_n + 1, causal);
        SCOPED_TRACE(c.name() + (deterministic ? " deterministic" : ""));
        const AttnInputs in = make_inputs(c, ++seed);
        FwdOutputs fwd;
        FA_SKIP_IF_UNSUPPORTED(fwd = run_forward(in, kBackend, Device::cuda(0)));
        const BwdOutputs got =
            run_backward_via(in, fwd, kBackend, Device::cuda(0), deterministic, [](const flashattn::BwdParams& p) {
              const auto problem = flashattn::detail::make_bwd_problem(p);
              sm80::launch_bwd(problem, sm80::kSm80SmemBytes, sm80::DeviceFacts{}, nullptr);
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            });
        expect_backward_within_criterion(got, reference_backward(in), naive_lowp(in, true), c.dtype);
      }
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaSm80Buckets, testing::ValuesIn(sm80::kHeadDimBuckets),
                         [](const testing::TestParamInfo<int>& info) { return "d" + std::to_string(info.param); });

TEST(CudaSm80, DeterministicBackwardIsBitwiseRepeatable) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  AttnConfig c;
  c.dtype = DType::bf16;
  c.batch = 2, c.seqlen_q = 300, c.seqlen_k = 257, c.heads = 4, c.heads_k = 2, c.head_dim = 128;
  c.causal = true;
  c.dropout_p = 0.1f;
  const AttnInputs in = make_inputs(c, 7);
  FwdOutputs fwd;
  FA_SKIP_IF_UNSUPPORTED(fwd = run_forward(in, kBackend, Device::cuda(0)));
  const BwdOutputs a = run_backward(in, fwd, kBackend, Device::cuda(0), true);
  const BwdOutputs b = run_backward(in, fwd, kBackend, Device::cuda(0), true);
  EXPECT_EQ(std::memcmp(a.dq.data(), b.dq.data(), a.dq.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.dk.data(), b.dk.data(), a.dk.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.dv.data(), b.dv.data(), a.dv.nbytes()), 0);
  expect_backward_matches(c, 7, true);
}

TEST(CudaSm80, DropoutHalfMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  for (int d : {64, 128, 256}) {
    AttnConfig c;
    c.dtype = DType::f16;
    c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 190, c.heads = 4, c.heads_k = 4, c.head_dim = d;
    c.dropout_p = 0.5f;
    c.dropout_seed = 987654321;
    c.dropout_offset = 3;
    expect_forward_matches(c, 40 + d);
    expect_backward_matches(c, 40 + d, false);
  }
}

TEST(CudaSm80, LargerProblemMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  AttnConfig c;
  c.dtype = DType::bf16;
  c.batch = 2, c.seqlen_q = 1024, c.seqlen_k = 1024, c.heads = 4, c.heads_k = 4, c.head_dim = 128;
  for (bool causal : {false, true}) {
    c.causal = causal;
    expect_forward_matches(c, 11);
    expect_backward_matches(c, 12, false);
  }
}

// Many tiles per problem on the paired forward tile (feature-free, D >= 160, on devices that hold two per
// SM). In bucket 256 it runs a persistent grid when every tile costs the same: as many CTAs as the device
// holds, each walking the tile list and loading its next tile's Q and first K tile while it finishes the
// current one, and storing O through the quad transpose (fwd_kernel.cuh, fwd_epilogue.cuh). 1024 tiles
// are several strides on any GPU; the last query tile of each sequence is partial, GQA and batch vary
// across a CTA's tiles, and head dims below their bucket leave the last transposed chunks unstored.
TEST(CudaSm80, PersistentForwardWalksManyTilesPerCta) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  uint64_t seed = 500;
  for (int d : {160, 184, 224, 248, 256}) {
    AttnConfig c;
    c.dtype = d % 16 == 0 ? DType::bf16 : DType::f16;
    c.batch = 4, c.heads = 128, c.heads_k = 16, c.head_dim = d;
    c.seqlen_q = sm80::fwd_tile(sm80::head_dim_bucket(d), false, true).block_m + 2, c.seqlen_k = 150;
    expect_forward_matches(c, ++seed);
    if (d == 256) {  // no keys: no tile loads ahead, each stages its (zero) output in Q's tile
      c.seqlen_k = 0;
      expect_forward_matches(c, ++seed);
    }
  }
}

// max_seqlen_q is only an upper bound of a varlen call's lengths, so it can ask for more query tiles than
// the kernel's 32-bit tile loop (index + grid) handles: the backend refuses the call, naming the limit,
// instead of wrapping to negative tiles.
TEST(CudaSm80, RefusesMoreThan2To30QueryTiles) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  AttnConfig c;
  c.dtype = DType::f16, c.heads = 96, c.heads_k = 96, c.head_dim = 128;
  c.varlen_q = {1024}, c.varlen_k = {1024};
  AttnInputs in = make_inputs(c, 600);
  in.max_seqlen_q = std::numeric_limits<int32_t>::max() - 256;
  try {
    run_forward(in, kBackend, Device::cuda(0));
    FAIL() << "cuda_sm80 accepted " << in.max_seqlen_q << " x 96 query rows";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("above 2^30"), std::string::npos) << e.what();
  }
}

#if defined(FLASHATTN_WITH_CUDA)
// The kernels run on the caller's stream: results on a fresh stream equal those on the default stream.
TEST(CudaSm80, RunsOnTheCallersStream) {
  FA_SKIP_WITHOUT_GPU("cuda_sm80");
  AttnConfig c;
  c.dtype = DType::f16;
  c.batch = 2, c.seqlen_q = 77, c.seqlen_k = 130, c.heads = 4, c.heads_k = 2, c.head_dim = 64;
  c.causal = true;
  const AttnInputs in = make_inputs(c, 21);
  FwdOutputs expect;
  FA_SKIP_IF_UNSUPPORTED(expect = run_forward(in, kBackend, Device::cuda(0)));

  const Device dev = Device::cuda(0);
  DeviceTensor q(in.q, dev), k(in.k, dev), v(in.v, dev);
  HostTensor out(c.dtype, in.q.shape()), lse(DType::f32, {c.batch, c.heads, c.seqlen_q});
  out.poison();
  lse.poison();
  DeviceTensor d_out(out, dev), d_lse(lse, dev);
  flashattn::FwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  p.options.causal = true;
  p.options.backend = kBackend;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  flashattn::forward(p, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  const HostTensor got_out = d_out.download(), got_lse = d_lse.download();
  EXPECT_EQ(std::memcmp(got_out.data(), expect.out.data(), got_out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(got_lse.data(), expect.lse.data(), got_lse.nbytes()), 0);
}
#endif

}  // namespace
}  // namespace fa_test
