// cuda_sm90 (the Hopper forward and backward): host checks of what its kernels rely on, run everywhere:
//  * the shared-memory layout TMA writes with the 128-byte swizzle is the one the wgmma descriptors read
//    (both modelled after the PTX ISA's definitions) and sm80's SmemTile, which the epilogues reuse;
//  * the tile tables' budgets (shared memory, registers after setmaxnreg, 1024-byte aligned tiles);
//  * the pipeline's stage/phase indexing (pipeline.h), run against a model of mbarrier phases with random
//    interleavings of the producer, the TMA engine and the consumers.
// The kernels themselves run in the shared catalogues (test_backend_forward.cpp, test_backend_backward.cpp)
// forced onto cuda_sm90 on a GPU, and in the GPU part at the end.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "cuda/attn/tile_range.h"
#include "cuda/sm80/smem_layout.h"
#include "cuda/sm90/bwd_tile.h"
#include "cuda/sm90/dq_tiles.h"
#include "cuda/sm90/fp8_fwd_layout.h"
#include "cuda/sm90/fwd_tile.h"
#include "cuda/sm90/pipeline.h"
#include "gpu_test.h"

#if defined(FLASHATTN_WITH_CUDA)
#include "api/backends.h"
#include "attention_case.h"
#include "criterion.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"
#endif

namespace fa_test {
namespace {

namespace sm90 = flashattn::detail::cuda::sm90;
namespace sm80 = flashattn::detail::cuda::sm80;

// The 128-byte swizzle of TMA and wgmma on an offset from a 1024-byte aligned base (PTX ISA, "Tensor
// swizzling modes" / "Shared memory matrix layout"): the 16-byte chunk bits 4-6 are XORed with bits 7-9.
uint32_t swizzle128(uint32_t offset) { return offset ^ (((offset >> 7) & 7u) << 4); }

// Where TMA puts element (r, c) of the box (64 elements, rows) it writes at `panel_base`: row r at r * 128
// bytes, then the swizzle.
uint32_t tma_box_offset(uint32_t panel_base, int r, int c) {
  return panel_base + swizzle128(uint32_t(r) * 128 + uint32_t(c) * 2);
}

// Where wgmma reads element (m, k) of a K-major operand (m along M or N, k < 16 along K) whose descriptor
// starts at `start` with stride byte offset `sbo` (128-byte swizzle: 8-row groups sbo apart, rows 128 bytes
// apart inside a group, then the swizzle of the address).
uint32_t wgmma_kmajor_offset(uint32_t start, uint32_t sbo, int m, int k) {
  return swizzle128(start + uint32_t(m / 8) * sbo + uint32_t(m % 8) * 128 + uint32_t(k) * 2);
}

// Where wgmma reads element (k, n) of an MN-major operand (k < 16 along K, n along N): 64-element groups
// of N `lbo` apart, 8-row groups of K `sbo` apart, rows of K 128 bytes apart inside a group.
uint32_t wgmma_mnmajor_offset(uint32_t start, uint32_t lbo, uint32_t sbo, int k, int n) {
  return swizzle128(start + uint32_t(n / 64) * lbo + uint32_t(k / 8) * sbo + uint32_t(k % 8) * 128 +
                    uint32_t(n % 64) * 2);
}

template <int kRows, int kCols>
void expect_tile_layout() {
  std::set<uint32_t> seen;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const uint32_t off = sm90::tile_byte_offset(kRows, r, c);
      // TMA writes panel p's box at p * rows * 128 bytes.
      const int p = c / 64;
      ASSERT_EQ(off, tma_box_offset(uint32_t(p * kRows * 128), r, c % 64)) << r << ", " << c;
      // sm80's tile (the epilogue's offsets) is the same layout.
      ASSERT_EQ(off, uint32_t(sm80::SmemTile<kRows, kCols>::offset(r, c)) * 2) << r << ", " << c;
      ASSERT_LT(off, uint32_t(kRows * kCols * 2));
      ASSERT_TRUE(seen.insert(off).second) << "two elements at byte " << off;
    }
}

TEST(CudaSm90Host, TmaBoxesWriteThePanelLayout) {
  expect_tile_layout<64, 64>();
  expect_tile_layout<128, 128>();
  expect_tile_layout<80, 256>();
  expect_tile_layout<112, 192>();
  expect_tile_layout<128, 192>();
  expect_tile_layout<192, 64>();
}

// The epilogue's TMA store (FwdArgs::tma_store): warpgroup w's box of panel p starts at o_offset + p * block_m
// * 128 + 64 w * 128 bytes and reads (row, col) of its 64 rows where the staging tile (sm80's SmemTile
// offsets, store_acc) put O[64 w + row][64 p + col]; each box starts on a swizzle atom, so the swizzle phase
// of the box is the tile's.
TEST(CudaSm90Host, TmaStoreBoxesReadTheStagedO) {
  for (int bucket : {64, 128, 192, 256}) {
    const sm90::Sm90FwdTile t = sm90::fwd_tile(bucket);
    ASSERT_EQ(t.o_offset() % 1024, 0) << bucket;
    for (int wg = 0; wg < t.consumer_warpgroups(); ++wg)
      for (int p = 0; p < t.panels(); ++p) {
        const uint32_t box = uint32_t(p * t.block_m * 128 + wg * sm90::kWgmmaRows * 128);
        ASSERT_EQ(box % 1024, 0u);
        for (int r = 0; r < sm90::kWgmmaRows; ++r)
          for (int c = 0; c < 64; ++c)
            ASSERT_EQ(tma_box_offset(box, r, c),
                      sm90::tile_byte_offset(t.block_m, wg * sm90::kWgmmaRows + r, 64 * p + c))
                << bucket << ": warpgroup " << wg << ", panel " << p << ", (" << r << ", " << c << ")";
      }
  }
}

// S = Q K^T: k-step kk of the warpgroup whose rows start at row0 reads Q[row0 + m][16 kk + k], and of the
// K tile K[n][16 kk + k].
TEST(CudaSm90Host, KMajorDescriptorsReadQAndK) {
  for (int rows : {64, 80, 112, 128, 192})
    for (int dim : {64, 128, 192, 256})
      for (int row0 = 0; row0 + 64 <= rows; row0 += 64)
        for (int kk = 0; kk < dim / 16; ++kk) {
          const uint32_t start = sm90::kmajor_start(rows, row0, kk);
          const int span = row0 == 0 ? rows : 64;  // B operands span the whole tile, A ones 64 rows
          for (int m = 0; m < span; ++m)
            for (int k = 0; k < 16; ++k)
              ASSERT_EQ(wgmma_kmajor_offset(start, sm90::kSwizzleAtomBytes, m, k),
                        sm90::tile_byte_offset(rows, row0 + m, 16 * kk + k))
                  << "rows " << rows << " dim " << dim << " row0 " << row0 << " kk " << kk << " m " << m << " k " << k;
        }
}

// O += P V: k-step kk reads V[16 kk + k][n] over the whole head dim.
TEST(CudaSm90Host, MnMajorDescriptorsReadV) {
  for (int rows : {64, 80, 112, 128})
    for (int dim : {64, 128, 192, 256})
      for (int kk = 0; kk < rows / 16; ++kk)
        for (int k = 0; k < 16; ++k)
          for (int n = 0; n < dim; ++n)
            ASSERT_EQ(wgmma_mnmajor_offset(sm90::mnmajor_start(kk), sm90::mnmajor_leading(rows),
                                           sm90::kSwizzleAtomBytes, k, n),
                      sm90::tile_byte_offset(rows, 16 * kk + k, n))
                << "rows " << rows << " dim " << dim << " kk " << kk << " k " << k << " n " << n;
}

// The backward's tiles: shared memory within sm_90's opt-in, registers after setmaxnreg within the file,
// every tile on the swizzle atom, the layout's parts in order without overlap, two consumer warpgroups of
// 64 keys, and dQ split by columns exactly where the head dim has two panels or more.
TEST(CudaSm90Host, BackwardTileTableFitsHopper) {
  constexpr int kSmemOptin = 227 * 1024;
  for (int bucket : {64, 128}) {
    const sm90::Sm90BwdTile t = sm90::bwd_tile(bucket);
    SCOPED_TRACE(bucket);
    ASSERT_EQ(t.head_dim, bucket);
    EXPECT_EQ(sm90::bwd_bucket(bucket), bucket);
    EXPECT_EQ(t.consumer_warpgroups(), 2);
    EXPECT_EQ(t.block_m, 64);  // the S^T, dP^T and dQ products are m64n64k16
    EXPECT_LE(t.smem_bytes(), kSmemOptin);
    EXPECT_TRUE(t.registers_fit());
    EXPECT_EQ(t.producer_regs % 8, 0);
    EXPECT_EQ(t.consumer_regs % 8, 0);
    EXPECT_GE(t.producer_regs, 24);
    EXPECT_EQ(t.dq_split_columns(), bucket >= 128);
    EXPECT_EQ(t.dq_cols(), 64);
    EXPECT_EQ(t.dq_cols() * (t.dq_split_columns() ? 2 : 1), t.head_dim);
    EXPECT_EQ(t.dq_keys() * (t.dq_split_columns() ? 1 : 2), t.block_n);
    std::vector<std::pair<int, int>> parts = {{t.k_offset(), t.kv_bytes()}, {t.v_offset(), t.kv_bytes()}};
    for (int s = 0; s < t.stages; ++s) {
      parts.push_back({t.q_offset(s), t.q_bytes()});
      parts.push_back({t.do_offset(s), t.q_bytes()});
      parts.push_back({t.lse_offset(s), t.stat_bytes()});
      parts.push_back({t.dsum_offset(s), t.stat_bytes()});
    }
    for (int buf = 0; buf < 2; ++buf) parts.push_back({t.ds_offset(buf), t.ds_bytes()});
    for (int c = 0; c < t.consumer_warpgroups(); ++c) parts.push_back({t.dq_offset(c), t.dq_bytes()});
    EXPECT_EQ(t.dq_bytes(), 4 * sm90::kDqBlockFloats);  // one block of dq_accum (dq_tiles.h)
    EXPECT_EQ(t.block_m, sm90::kDqTileRows);
    parts.push_back({t.barrier_offset(), 8 * t.barriers()});
    parts.push_back({t.ticket_offset(), 8});
    std::sort(parts.begin(), parts.end());
    for (size_t i = 0; i + 1 < parts.size(); ++i) EXPECT_EQ(parts[i].first + parts[i].second, parts[i + 1].first);
    for (const auto& [offset, bytes] : parts)
      if (bytes % 1024 == 0) EXPECT_EQ(offset % 1024, 0) << offset;  // tiles; the fp32 rows and barriers are smaller
    EXPECT_EQ(t.smem_bytes(), t.ticket_offset() + 8 + 1024);
  }
  EXPECT_EQ(sm90::bwd_bucket(40), 64);
  EXPECT_EQ(sm90::bwd_bucket(96), 128);
  EXPECT_EQ(sm90::bwd_bucket(136), 0);
  EXPECT_EQ(sm90::bwd_bucket(32), 0);
}

// The deterministic backward orders each query tile's dQ reductions by key tile and counts a CTA's
// predecessors as the run of neighbouring key tiles that also see the query tile (bwd_kernel.cuh): that
// needs the key tiles seeing a query tile, as the kernel derives them (query_tiles_for_key_tile), to be
// consecutive.
// Brute force over causal, sliding-window and one-sided masks with Sq != Sk and partial last tiles.
TEST(CudaSm90Host, KeyTilesSeeingAQueryTileAreConsecutive) {
  constexpr int kBlockN = sm90::bwd_tile(128).block_n, kBlockM = sm90::bwd_tile(128).block_m;
  std::mt19937 rng(2424);
  for (int trial = 0; trial < 400; ++trial) {
    flashattn::detail::Mask mask;
    mask.sq = 1 + int64_t(rng() % 900);
    mask.sk = 1 + int64_t(rng() % 1400);
    const int kind = int(rng() % 4);  // causal, window, left only, right only
    mask.window_left = kind == 0 || kind == 3 ? -1 : int64_t(rng() % 500);
    mask.window_right = kind == 0 ? 0 : kind == 2 ? -1 : int64_t(rng() % 300);
    const int n_tiles = int((mask.sk + kBlockN - 1) / kBlockN);
    const int m_tiles = int((mask.sq + kBlockM - 1) / kBlockM);
    for (int m = 0; m < m_tiles; ++m) {
      std::vector<int> seeing;
      for (int n = 0; n < n_tiles; ++n) {
        const auto r = flashattn::detail::cuda::attn::query_tiles_for_key_tile(mask, n, kBlockN, kBlockM);
        if (r.begin <= m && m < r.end) seeing.push_back(n);
      }
      if (!seeing.empty())
        EXPECT_EQ(seeing.back() - seeing.front() + 1, int(seeing.size()))
            << "sq " << mask.sq << " sk " << mask.sk << " window " << mask.window_left << "," << mask.window_right
            << " query tile " << m;
    }
    if (HasFailure()) return;
  }
}

// The backward's dq_accum tiles (dq_tiles.h): inside a block every (row, column) has its own float, and the
// 8-byte stores of a wgmma accumulator fragment (lane 4 g + t: rows g and g + 8 of a 16-row slice, columns
// 8 j + 2 t and + 1) fall on each bank exactly twice (two wavefronts, the minimum for 256 bytes); aligned
// 8-column chunks stay contiguous; the blocks of (tile, head, panel) tile the buffer; every sequence's
// tiles are its own, dense or varlen (empty and short sequences included), inside dq_tiles(); and the
// pre/post kernels' row policy finds each row's place (and none for rows outside every sequence).
TEST(CudaSm90Host, BackwardDqTilesAreDisjointAndConflictFree) {
  std::vector<int> seen(sm90::kDqBlockFloats, 0);
  for (int r = 0; r < sm90::kDqTileRows; ++r)
    for (int c = 0; c < sm90::kDqPanelCols; ++c) {
      const int at = sm90::dq_in_block(r, c);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, sm90::kDqBlockFloats);
      ++seen[size_t(at)];
      if (c % 8 != 0) EXPECT_EQ(at, sm90::dq_in_block(r, c - c % 8) + c % 8) << r << " " << c;
    }
  for (int n : seen) ASSERT_EQ(n, 1);
  for (int w = 0; w < 4; ++w)
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 8; ++j) {
        std::vector<int> bank_hits(32, 0);
        for (int lane = 0; lane < 32; ++lane) {
          const int row = 16 * w + lane / 4 + 8 * half, col = 8 * j + 2 * (lane % 4);
          const int word = sm90::dq_in_block(row, col);
          ++bank_hits[size_t(word % 32)];
          ++bank_hits[size_t((word + 1) % 32)];
        }
        for (int hits : bank_hits) EXPECT_EQ(hits, 2) << "warp " << w << " half " << half << " group " << j;
      }
  EXPECT_EQ(sm90::dq_block_offset(1, 0, 0, 3, 128), 6 * sm90::kDqBlockFloats);
  EXPECT_EQ(sm90::dq_block_offset(0, 2, 1, 3, 128), 5 * sm90::kDqBlockFloats);
  // Sequences' tiles: dense, and varlen with empty, short and long sequences.
  const std::vector<std::vector<int32_t>> varlens = {{0, 0, 1, 65, 65, 200, 263, 264}, {0, 64, 128, 129}, {0, 0, 0}};
  for (const auto& cu : varlens) {
    const int64_t batch = int64_t(cu.size()) - 1, total = cu.back();
    const int64_t tiles = sm90::dq_tiles(true, batch, 0, total);
    std::vector<int> owner(size_t(tiles), -1);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t first = sm90::dq_first_tile(true, b, 0, cu[size_t(b)]);
      for (int64_t t = 0; t < (cu[size_t(b) + 1] - cu[size_t(b)] + 63) / 64; ++t) {
        ASSERT_LT(first + t, tiles) << "sequence " << b;
        EXPECT_EQ(owner[size_t(first + t)], -1) << "tile " << first + t << " shared";
        owner[size_t(first + t)] = int(b);
      }
    }
    flashattn::detail::BwdProblem p;
    p.batch = batch;
    p.heads = 2;
    p.head_dim = 96;
    p.seqlen_q = 200;
    p.total_q = total + 3;  // rows past the last sequence
    p.cu_seqlens_q = cu.data();
    for (int64_t row = 0; row < p.total_q; ++row) {
      int64_t b = 0;
      while (b + 1 < batch && cu[size_t(b) + 1] <= row) ++b;
      const bool inside = batch > 0 && row >= cu[size_t(b)] && row < cu[size_t(b) + 1];
      const int64_t at = sm90::TiledDqLayout::offset(p, row, 1, 40);
      if (!inside) {
        EXPECT_EQ(at, -1) << "row " << row;
        continue;
      }
      EXPECT_EQ(at, sm90::dq_offset(sm90::dq_first_tile(true, b, 0, cu[size_t(b)]), row - cu[size_t(b)], 1, 40, 2, 128))
          << "row " << row;
    }
  }
  flashattn::detail::BwdProblem dense;
  dense.batch = 3;
  dense.heads = 2;
  dense.head_dim = 64;
  dense.seqlen_q = 70;  // two tiles per sequence, the second partial
  dense.total_q = 210;
  EXPECT_EQ(sm90::dq_tiles(false, 3, 70, 210), 6);
  EXPECT_EQ(sm90::TiledDqLayout::offset(dense, 140 + 65, 1, 8),
            sm90::dq_block_offset(5, 1, 0, 2, 64) + sm90::dq_in_block(1, 8));
  EXPECT_EQ(sm90::TiledDqLayout::zero_chunks(dense), 8);
}

// dQ = dS K in the backward: dS^T is stored keys x queries in a 128 x 64 tile (sm80's SmemTile layout,
// written with store_acc's offsets) and read as the MN-major A operand (M = queries, K = keys), K tile's
// panel p as the MN-major B (K = keys, N = 64 head dims of the panel): k-step kk of a product whose keys
// start at key0 reads dS^T[key0 + 16 kk + k][m] and K[key0 + 16 kk + k][64 p + n].
TEST(CudaSm90Host, MnMajorDescriptorsReadDsAndKForDq) {
  using DsTile = sm80::SmemTile<128, 64>;
  for (int key0 : {0, 64})
    for (int kk = 0; kk < 4; ++kk)
      for (int k = 0; k < 16; ++k)
        for (int m = 0; m < 64; ++m) {
          const uint32_t start = uint32_t(key0) * 128 + sm90::mnmajor_start(kk);
          ASSERT_EQ(wgmma_mnmajor_offset(start, sm90::mnmajor_leading(128), sm90::kSwizzleAtomBytes, k, m),
                    uint32_t(DsTile::offset(key0 + 16 * kk + k, m)) * 2)
              << "key0 " << key0 << " kk " << kk << " k " << k << " m " << m;
          for (int panel : {0, 1}) {
            const uint32_t k_start = uint32_t(panel * 128 + key0) * 128 + sm90::mnmajor_start(kk);
            ASSERT_EQ(wgmma_mnmajor_offset(k_start, sm90::mnmajor_leading(128), sm90::kSwizzleAtomBytes, k, m),
                      sm90::tile_byte_offset(128, key0 + 16 * kk + k, 64 * panel + m));
          }
        }
}

// Paged K/V: a key tile is loaded as boxes of paged_box_rows rows, each from one page. The box height
// divides the page and the tile, is a multiple of 8, and the boxes written at their row offsets make the
// whole tile's layout (what the descriptors read); 0 exactly where no such height exists.
TEST(CudaSm90Host, PagedBoxesMakeTheTileLayout) {
  for (int block_n : {80, 128})
    for (int64_t page : {1, 3, 5, 8, 12, 16, 24, 40, 48, 64, 80, 100, 128, 160, 256, 272, 1024}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + " page " + std::to_string(page));
      const int box = sm90::paged_box_rows(page, block_n);
      bool exists = false;
      for (int h = 8; h <= block_n; h += 8) exists = exists || (page % h == 0 && block_n % h == 0);
      ASSERT_EQ(box != 0, exists);
      if (box == 0) continue;
      EXPECT_EQ(page % box, 0);
      EXPECT_EQ(block_n % box, 0);
      for (int h = box + 8; h <= block_n; h += 8) EXPECT_FALSE(page % h == 0 && block_n % h == 0) << h;
      for (int c = 0; c < block_n / box; ++c)
        for (int r = 0; r < box; ++r)
          for (int col = 0; col < 128; ++col) {
            const uint32_t panel = uint32_t(col / 64) * uint32_t(block_n) * 128 + uint32_t(c * box) * 128;
            ASSERT_EQ(tma_box_offset(panel, r, col % 64), sm90::tile_byte_offset(block_n, c * box + r, col))
                << "box " << c << " row " << r << " col " << col;
          }
    }
  EXPECT_EQ(sm90::paged_box_rows(0, 128), 0);
}

// Paged rows copied with cp.async (fwd_kernel.cuh, produce_paged_rows): at every bucket the warpgroup's
// copies land where the wgmma descriptors read each (row, 16-byte chunk) of the tile, each exactly once;
// every warp instruction (copy j of pass `pass`) writes each of the eight 16-byte bank groups four times
// (the least its 512 bytes allow) and reads whole 32-byte sectors of a row (its lanes' chunks adjacent).
TEST(CudaSm90Host, PagedRowCopiesCoverTheTileWithoutBankConflicts) {
  for (int bucket : {64, 128, 192, 256}) {
    const sm90::Sm90FwdTile tile = sm90::fwd_tile(bucket);
    const int rows = tile.block_n, chunks = bucket / 8, per_row = chunks / sm90::kRowCopyThreadsPerRow;
    SCOPED_TRACE("bucket " + std::to_string(bucket));
    ASSERT_EQ(chunks % sm90::kRowCopyThreadsPerRow, 0);
    std::vector<int> hits(size_t(rows * chunks), 0);
    for (int pass = 0; pass < sm90::row_copy_passes(rows); ++pass)
      for (int j = 0; j < per_row; ++j)
        for (int warp = 0; warp < 4; ++warp) {
          int bank_groups[8] = {};
          int active = 0;
          for (int lane = 0; lane < 32; ++lane) {
            const int tid = 32 * warp + lane;
            const int row = sm90::row_copy_row(tid, pass), chunk = sm90::row_copy_chunk(tid, j);
            if (row >= rows) continue;
            ++active;
            ASSERT_LT(chunk, chunks);
            const uint32_t off = sm90::row_copy_offset(sm90::row_copy_base(tid), rows, pass, j);
            ASSERT_EQ(off, sm90::tile_byte_offset(rows, row, 8 * chunk)) << "tid " << tid << " pass " << pass;
            ++hits[size_t(row * chunks + chunk)];
            ++bank_groups[(off / 16) % 8];
            // A row's lanes read adjacent chunks, the first at an even chunk: whole 32-byte sectors.
            const int first = sm90::row_copy_chunk(tid - lane % sm90::kRowCopyThreadsPerRow, j);
            EXPECT_EQ(first % 2, 0);
            EXPECT_EQ(chunk - first, lane % sm90::kRowCopyThreadsPerRow);
          }
          for (int g = 0; g < 8; ++g) EXPECT_EQ(bank_groups[g], active / 8) << "warp " << warp << " group " << g;
        }
    for (int i = 0; i < rows * chunks; ++i)
      ASSERT_EQ(hits[size_t(i)], 1) << "row " << i / chunks << " chunk " << i % chunks;
  }
}

// The clearing of a V tile's rows past a sequence (fwd_kernel.cuh, clear_rows) writes whole 128-byte panel
// rows: row r of panel p is exactly bytes [p * rows * 128 + r * 128, + 128) of the tile, whatever the
// swizzle does inside it.
TEST(CudaSm90Host, PanelRowsAreContiguous) {
  for (int rows : {80, 128})
    for (int r = 0; r < rows; ++r)
      for (int col = 0; col < 256; ++col) {
        const uint32_t row_start = uint32_t(col / 64) * uint32_t(rows) * 128 + uint32_t(r) * 128;
        const uint32_t off = sm90::tile_byte_offset(rows, r, col);
        ASSERT_GE(off, row_start);
        ASSERT_LT(off, row_start + 128);
      }
}

// setmaxnreg.inc only takes back what the CTA's setmaxnreg.dec released: with 384 threads the launch gives
// 168 registers a thread, so three warpgroups share 504 per lane. The backward's softcap/ALiBi split once
// asked 32 + 2 x 240 = 512 and hung on the GPU (its consumers waited for registers forever).
TEST(CudaSm90Host, SetmaxnregBudgetIsTheLaunchAllocation) {
  EXPECT_TRUE(sm90::setmaxnreg_fits(3, 24, 240));
  EXPECT_TRUE(sm90::setmaxnreg_fits(3, 40, 232));
  EXPECT_FALSE(sm90::setmaxnreg_fits(3, 32, 240));
  EXPECT_FALSE(sm90::setmaxnreg_fits(3, 48, 232));
  EXPECT_TRUE(sm90::setmaxnreg_fits(2, 24, 256));  // 256 threads: 255 a thread at launch
  for (bool general : {false, true}) {
    for (int bucket : {64, 128}) {
      const sm90::Sm90BwdTile b = sm90::bwd_tile(bucket, general);
      EXPECT_TRUE(b.registers_fit()) << bucket << " " << general;
      EXPECT_EQ(b.producer_regs + 2 * b.consumer_regs, 504) << "the split leaves registers unused";
    }
    for (int bucket : {64, 128, 192, 256}) {
      const sm90::Sm90FwdTile f = sm90::fwd_tile(bucket, general);
      if (f.head_dim != 0) EXPECT_TRUE(f.registers_fit()) << bucket << " " << general;
    }
  }
}

TEST(CudaSm90Host, TileTableFitsHopper) {
  constexpr int kSmemOptin = 227 * 1024;  // sm_90's opt-in shared memory per CTA
  for (int bucket : {64, 96, 128, 160, 192, 224, 256}) {
    const sm90::Sm90FwdTile t = sm90::fwd_tile(bucket);
    if (t.head_dim == 0) continue;
    SCOPED_TRACE(bucket);
    EXPECT_EQ(t.head_dim, bucket);
    EXPECT_EQ(t.block_m % sm90::kWgmmaRows, 0);
    EXPECT_EQ(t.block_n % 16, 0);
    EXPECT_EQ(t.head_dim % 64, 0);  // whole 128-byte panels
    EXPECT_LE(t.smem_bytes(), kSmemOptin);
    EXPECT_TRUE(t.registers_fit());
    // the softcap/ALiBi instance differs in its register split only
    const sm90::Sm90FwdTile g = sm90::fwd_tile(bucket, true);
    EXPECT_TRUE(g.registers_fit());
    EXPECT_EQ(g.smem_bytes(), t.smem_bytes());
    EXPECT_EQ(g.block_n, t.block_n);
    EXPECT_EQ(g.stages, t.stages);
    for (const sm90::Sm90FwdTile& x : {t, g}) {  // setmaxnreg takes multiples of 8 in [24, 256]
      EXPECT_EQ(x.producer_regs % 8, 0);
      EXPECT_EQ(x.consumer_regs % 8, 0);
      EXPECT_GE(x.producer_regs, 24);
      EXPECT_LE(x.consumer_regs, 256);
    }
    EXPECT_GE(t.stages, 2);  // the ping-pong turns (fwd_kernel.cuh)
    // every tile starts on the swizzle atom, the barriers on 8 bytes
    EXPECT_EQ(t.q_bytes() % 1024, 0);
    for (int s = 0; s < t.stages; ++s) {
      EXPECT_EQ(t.k_offset(s) % 1024, 0);
      EXPECT_EQ(t.v_offset(s) % 1024, 0);
    }
    // O's staging tile: its own after the V stages where it fits, else Q's (offset 0); the barriers after
    // the last tile and inside the request
    EXPECT_EQ(t.o_offset() % 1024, 0);
    if (t.o_separate()) {
      EXPECT_EQ(t.o_offset(), t.v_offset(t.stages - 1) + t.kv_bytes());
      EXPECT_EQ(t.barrier_offset(), t.o_offset() + t.q_bytes());
    } else {
      EXPECT_EQ(t.o_offset(), 0);
      EXPECT_EQ(t.barrier_offset(), t.v_offset(t.stages - 1) + t.kv_bytes());
    }
    EXPECT_EQ(t.smem_bytes(), t.barrier_offset() + 8 * t.barriers() + 1024);
    // the warpgroups' Q rows start on 8-row groups
    EXPECT_EQ(sm90::kWgmmaRows * int(sm90::kPanelRowBytes) % 1024, 0);
  }
  // the persistent grid's epilogue overlaps the next Q where O has a tile of its own: D = 64 and 128
  EXPECT_TRUE(sm90::fwd_tile(64).o_separate());
  EXPECT_TRUE(sm90::fwd_tile(128).o_separate());
  EXPECT_FALSE(sm90::fwd_tile(192).o_separate());
  EXPECT_FALSE(sm90::fwd_tile(256).o_separate());
  EXPECT_EQ(sm90::fwd_tile(192).panels(), 3);
  EXPECT_EQ(sm90::fwd_bucket(128), 128);
  EXPECT_EQ(sm90::fwd_bucket(72), 128);
  EXPECT_EQ(sm90::fwd_bucket(64), 64);
  EXPECT_EQ(sm90::fwd_bucket(40), 64);
  EXPECT_EQ(sm90::fwd_bucket(32), 0);
  EXPECT_EQ(sm90::fwd_bucket(136), 192);
  EXPECT_EQ(sm90::fwd_bucket(192), 192);
  EXPECT_EQ(sm90::fwd_bucket(200), 256);
  EXPECT_EQ(sm90::fwd_bucket(256), 256);
  EXPECT_EQ(sm90::fwd_bucket(264), 0);
}

// A model of one mbarrier (PTX ISA): pending arrivals and transaction bytes of the current phase; the
// phase completes when both reach zero. try_wait(P) is true while the current phase's parity is !P.
struct ModelBarrier {
  int count = 1;
  int pending = 1;
  int64_t tx = 0;
  uint32_t phase = 0;  // phases completed so far

  void maybe_complete() {
    if (pending == 0 && tx == 0) {
      ++phase;
      pending = count;
    }
  }
  void arrive() {
    --pending;
    maybe_complete();
  }
  void arrive_expect_tx(int64_t bytes) {
    tx += bytes;
    arrive();
  }
  void complete_tx(int64_t bytes) {
    tx -= bytes;
    maybe_complete();
  }
  bool try_wait(uint32_t parity) const { return (phase & 1u) != parity; }
};

// Runs `tiles` tiles through a ring of kStages stages with one producer, an asynchronous copy engine and
// `consumers` consumers, scheduled at random. A consumer reads a stage between its full wait and its
// empty arrival; the copy engine writes a stage when it lands. Fails if a write lands on a stage a
// consumer is reading, a consumer reads the wrong tile, or nothing can move (deadlock). `broken_parity`
// makes the producer wait for the wrong empty parity (the test must then detect a deadlock).
template <int kStages>
::testing::AssertionResult run_pipeline(int tiles, int consumers, uint64_t seed, bool broken_parity = false) {
  std::vector<ModelBarrier> full(kStages), empty(kStages);
  for (auto& b : empty) b.count = b.pending = consumers;
  std::vector<int> content(kStages, -1);
  std::vector<int> readers(kStages, 0);
  struct Landing {
    int stage, tile;
  };
  std::vector<Landing> in_flight;  // issued copies not yet landed
  sm90::PipelineState<kStages> prod;
  int next_tile = 0;
  struct Consumer {
    sm90::PipelineState<kStages> st;
    int tile = 0;
    bool reading = false;
  };
  std::vector<Consumer> cons(static_cast<size_t>(consumers));
  std::mt19937_64 rng(seed);
  constexpr int64_t kBytes = 4096;
  for (int64_t step = 0; step < 100000; ++step) {
    bool done = next_tile == tiles && in_flight.empty();
    for (const Consumer& c : cons) done = done && c.tile == tiles;
    if (done) return ::testing::AssertionSuccess();
    // the actors that can move now
    std::vector<int> ready;
    if (next_tile < tiles &&
        empty[size_t(prod.stage)].try_wait(broken_parity ? prod.full_parity() : prod.empty_parity()))
      ready.push_back(0);
    if (!in_flight.empty()) ready.push_back(1);
    for (int i = 0; i < consumers; ++i) {
      const Consumer& c = cons[size_t(i)];
      if (c.tile < tiles && (c.reading || full[size_t(c.st.stage)].try_wait(c.st.full_parity())))
        ready.push_back(2 + i);
    }
    if (ready.empty()) return ::testing::AssertionFailure() << "deadlock at step " << step;
    const int actor = ready[rng() % ready.size()];
    if (actor == 0) {  // the producer arms the stage's full barrier and issues the copy
      full[size_t(prod.stage)].arrive_expect_tx(kBytes);
      in_flight.push_back({prod.stage, next_tile++});
      prod.advance();
    } else if (actor == 1) {  // one copy lands (in any order)
      const size_t i = rng() % in_flight.size();
      const Landing l = in_flight[i];
      in_flight.erase(in_flight.begin() + long(i));
      if (readers[size_t(l.stage)] != 0)
        return ::testing::AssertionFailure() << "tile " << l.tile << " landed on stage " << l.stage << " while read";
      content[size_t(l.stage)] = l.tile;
      full[size_t(l.stage)].complete_tx(kBytes);
    } else {
      Consumer& c = cons[size_t(actor - 2)];
      const size_t s = size_t(c.st.stage);
      if (content[s] != c.tile)
        return ::testing::AssertionFailure()
               << "consumer read stage " << s << " holding " << content[s] << " for tile " << c.tile;
      if (!c.reading) {
        c.reading = true;
        ++readers[s];
      } else {  // done reading: release the stage
        c.reading = false;
        --readers[s];
        empty[s].arrive();
        c.st.advance();
        ++c.tile;
      }
    }
  }
  return ::testing::AssertionFailure() << "did not finish";
}

TEST(CudaSm90Host, PipelinePhasesKeepStagesSafe) {
  for (uint64_t seed = 0; seed < 40; ++seed)
    for (int tiles : {0, 1, 2, 5, 17}) {
      EXPECT_TRUE(run_pipeline<1>(tiles, 2, seed)) << "1 stage, " << tiles << " tiles, seed " << seed;
      EXPECT_TRUE(run_pipeline<2>(tiles, 2, seed)) << "2 stages, " << tiles << " tiles, seed " << seed;
      EXPECT_TRUE(run_pipeline<3>(tiles, 3, seed)) << "3 stages, " << tiles << " tiles, seed " << seed;
      EXPECT_TRUE(run_pipeline<4>(tiles, 2, seed)) << "4 stages, " << tiles << " tiles, seed " << seed;
    }
}

// The check above can fail: a producer that waits for the full parity on `empty` never starts.
TEST(CudaSm90Host, PipelineModelCatchesAWrongParity) { EXPECT_FALSE(run_pipeline<2>(5, 2, 1, /*broken_parity=*/true)); }

// The consumers' ping-pong (fwd_kernel.cuh) on top of the ring: each consumer runs the kernel's sequence
// of operations for `tiles` key tiles (turn barriers: arrive / sync; ring: wait for a tile's stage, which
// starts reading it, and release it), modelled as a named barrier of two parties (the syncing warpgroup
// and the arriving one): a second arrival before the sync would complete the hardware barrier without the
// syncing warpgroup, so it fails here, as do a deadlock and arrivals left over at the end.
enum class Op { arrive_other, sync_mine, wait_tile, release_tile };
struct Step {
  Op op;
  int tile;
};
std::vector<Step> consumer_steps(int consumer, int tiles, bool pingpong) {
  std::vector<Step> v;
  const auto arrive_if = [&](bool c) {
    if (pingpong && c) v.push_back({Op::arrive_other, 0});
  };
  if (tiles > 0) {
    arrive_if(consumer == 1);
    if (pingpong) v.push_back({Op::sync_mine, 0});
    v.push_back({Op::wait_tile, 0});  // K[0], then Q K^T
    arrive_if(true);
  }
  for (int n = 0; n < tiles; ++n) {
    if (pingpong) v.push_back({Op::sync_mine, 0});
    v.push_back({Op::release_tile, n});  // V[n] read by P V, then the stage released
    if (n + 1 < tiles) {
      v.push_back({Op::wait_tile, n + 1});
      arrive_if(true);
    } else {
      arrive_if(consumer == 0);
    }
  }
  return v;
}

template <int kStages>
::testing::AssertionResult run_pingpong(int tiles, bool pingpong, uint64_t seed) {
  constexpr int kConsumers = 2;
  std::vector<ModelBarrier> full(kStages), empty(kStages);
  for (auto& b : empty) b.count = b.pending = kConsumers;
  std::vector<int> content(kStages, -1), readers(kStages, 0);
  int turn_pending[kConsumers] = {0, 0};  // arrivals waiting on consumer c's turn barrier
  sm90::PipelineState<kStages> prod;
  int next_tile = 0;
  std::vector<std::pair<int, int>> in_flight;  // (stage, tile) issued, not landed
  struct Consumer {
    std::vector<Step> steps;
    size_t at = 0;
    sm90::PipelineState<kStages> st;
  };
  Consumer cons[kConsumers] = {{consumer_steps(0, tiles, pingpong)}, {consumer_steps(1, tiles, pingpong)}};
  std::mt19937_64 rng(seed);
  for (int64_t step = 0; step < 100000; ++step) {
    bool done = next_tile == tiles && in_flight.empty();
    for (const Consumer& c : cons) done = done && c.at == c.steps.size();
    if (done) {
      if (turn_pending[0] != 0 || turn_pending[1] != 0)
        return ::testing::AssertionFailure() << "arrivals left on the turn barriers";
      return ::testing::AssertionSuccess();
    }
    std::vector<int> ready;
    if (next_tile < tiles && empty[size_t(prod.stage)].try_wait(prod.empty_parity())) ready.push_back(0);
    if (!in_flight.empty()) ready.push_back(1);
    for (int i = 0; i < kConsumers; ++i) {
      const Consumer& c = cons[i];
      if (c.at == c.steps.size()) continue;
      const Op op = c.steps[c.at].op;
      if ((op == Op::sync_mine && turn_pending[i] == 0) ||
          (op == Op::wait_tile && !full[size_t(c.st.stage)].try_wait(c.st.full_parity())))
        continue;
      ready.push_back(2 + i);
    }
    if (ready.empty()) return ::testing::AssertionFailure() << "deadlock at step " << step;
    const int actor = ready[rng() % ready.size()];
    if (actor == 0) {
      full[size_t(prod.stage)].arrive_expect_tx(1);
      in_flight.push_back({prod.stage, next_tile++});
      prod.advance();
    } else if (actor == 1) {
      const size_t i = rng() % in_flight.size();
      const auto [stage, tile] = in_flight[i];
      in_flight.erase(in_flight.begin() + long(i));
      if (readers[size_t(stage)] != 0) return ::testing::AssertionFailure() << "tile " << tile << " landed while read";
      content[size_t(stage)] = tile;
      full[size_t(stage)].complete_tx(1);
    } else {
      const int i = actor - 2;
      Consumer& c = cons[i];
      const Step s = c.steps[c.at++];
      const size_t stage = size_t(c.st.stage);
      switch (s.op) {
        case Op::arrive_other:
          if (turn_pending[1 - i]++ != 0) return ::testing::AssertionFailure() << "two arrivals in one turn";
          break;
        case Op::sync_mine:
          --turn_pending[i];
          break;
        case Op::wait_tile:
          if (content[stage] != s.tile) return ::testing::AssertionFailure() << "read the wrong tile";
          ++readers[stage];
          break;
        case Op::release_tile:
          if (content[stage] != s.tile) return ::testing::AssertionFailure() << "tile overwritten while read";
          --readers[stage];
          empty[stage].arrive();
          c.st.advance();
          break;
      }
    }
  }
  return ::testing::AssertionFailure() << "did not finish";
}

TEST(CudaSm90Host, PingPongTurnsNeitherDeadlockNorLeaveArrivals) {
  for (uint64_t seed = 0; seed < 40; ++seed)
    for (int tiles : {0, 1, 2, 3, 9})
      for (bool pingpong : {false, true}) {
        EXPECT_TRUE(run_pingpong<2>(tiles, pingpong, seed)) << tiles << " tiles, ping-pong " << pingpong;
        EXPECT_TRUE(run_pingpong<4>(tiles, pingpong, seed)) << tiles << " tiles, ping-pong " << pingpong;
      }
  // The model catches a ring too shallow for the turns (fwd_kernel.cuh's static_assert).
  bool deadlocked = false;
  for (uint64_t seed = 0; seed < 10; ++seed) deadlocked = deadlocked || !run_pingpong<1>(3, true, seed);
  EXPECT_TRUE(deadlocked);
}

TEST(CudaSm90Host, PipelineStateWalksTheRing) {
  sm90::PipelineState<3> st;
  for (int j = 0; j < 12; ++j) {
    EXPECT_EQ(st.stage, j % 3);
    EXPECT_EQ(st.full_parity(), uint32_t((j / 3) & 1));
    EXPECT_EQ(st.empty_parity(), uint32_t(((j / 3) & 1) ^ 1));
    st.advance();
  }
}

// The dynamic tile scheduler's slots (fwd_kernel.cuh, DynamicTiles) walk a ring of kSchedSlots as the K/V
// ring does, and the forward tiles' shared memory still holds the scheduler's barriers and words.
TEST(CudaSm90Host, SchedulerSlotsWalkTheRing) {
  sm90::PipelineState<sm90::kSchedSlots> st;
  for (uint32_t draw = 0; draw < 10; ++draw) {
    EXPECT_EQ(sm90::sched_slot(draw), uint32_t(st.stage));
    EXPECT_EQ(sm90::sched_phase(draw), st.full_parity());
    st.advance();
  }
  for (int bucket : {64, 128, 192, 256})
    for (bool general : {false, true}) {
      const sm90::Sm90FwdTile t = sm90::fwd_tile(bucket, general);
      EXPECT_LE(t.smem_bytes(), sm90::kSmemOptinBytes) << bucket;
    }
}

// The FP8 forward's relabelled P V (fp8_fwd_layout.h), against the PTX ISA's fragment tables: the 8-bit A
// fragment of a k32 step (register r of thread (g, t): row g + 8 (r % 2), k = 16 (r / 2) + 4t + byte) and the
// fp32 accumulator of m64nN (acc[j][e] of thread (g, t): row g + 8 (e / 2), column 8j + 2t + e % 2). Each A
// byte must be one of the thread's own S values, of the same row, at the key fp8_pv_key names, and the keys
// must be a permutation of the step's 32 (so that P V against a V^T whose column k holds key fp8_pv_key(k)
// sums the same terms as the plain product).
TEST(CudaSm90Host, Fp8PackedPHoldsTheRelabelledKeys) {
  std::set<int> keys;
  for (int k = 0; k < 32; ++k) keys.insert(sm90::fp8_pv_key(k));
  EXPECT_EQ(keys.size(), 32u);
  EXPECT_EQ(*keys.begin(), 0);
  EXPECT_EQ(*keys.rbegin(), 31);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < 4; ++i) {
        const int a_row = g + 8 * (r % 2), a_k = 16 * (r / 2) + 4 * t + i;
        const sm90::Fp8PackSource src = sm90::fp8_pack_source(r, i);
        ASSERT_GE(src.group, 0);
        ASSERT_LT(src.group, 4);
        const int s_row = g + 8 * (src.element / 2), s_col = 8 * src.group + 2 * t + src.element % 2;
        ASSERT_EQ(s_row, a_row) << "lane " << lane << ", register " << r << ", byte " << i;
        ASSERT_EQ(s_col, sm90::fp8_pv_key(a_k)) << "lane " << lane << ", register " << r << ", byte " << i;
      }
  }
}

// The V transpose's blocks (fp8_transpose_block): over a warp's 32 passes its lanes write every 4 x 4 block of
// the 128 x 128 V^T exactly once, and in every pass each of the four loads (four key rows of V at the lane's
// head dims) and each of the four stores (one V^T row of the block each) touches 32 distinct banks, with the
// addresses the kernel computes (swizzled_row_byte; the 4 columns of a block hold keys 2t, 2t + 1, 2t + 8,
// 2t + 9 of their 16-key half).
TEST(CudaSm90Host, Fp8TransposeCoversVtWithoutBankConflicts) {
  std::set<std::pair<int, int>> blocks;
  const auto bank = [](uint32_t byte) { return int(byte / 4 % 32); };
  for (int pass = 0; pass < sm90::kFp8TransposePasses; ++pass) {
    std::set<int> load_banks[4], store_banks[4];
    for (int lane = 0; lane < 32; ++lane) {
      const sm90::Fp8TransposeBlock blk = sm90::fp8_transpose_block(lane, pass);
      ASSERT_EQ(blk.d0 % 4, 0);
      ASSERT_EQ(blk.c0 % 4, 0);
      ASSERT_LT(blk.d0, 128);
      ASSERT_LT(blk.c0, 128);
      EXPECT_TRUE(blocks.insert({blk.d0, blk.c0}).second) << "block written twice: pass " << pass << ", lane " << lane;
      const int half0 = blk.c0 & ~15, t = (blk.c0 % 16) / 4;
      const int keys[4] = {half0 + 2 * t, half0 + 2 * t + 1, half0 + 8 + 2 * t, half0 + 9 + 2 * t};
      for (int i = 0; i < 4; ++i) {
        load_banks[i].insert(bank(sm90::swizzled_row_byte(keys[i], blk.d0)));
        store_banks[i].insert(bank(sm90::swizzled_row_byte(blk.d0 + i, blk.c0)));
      }
    }
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(load_banks[i].size(), 32u) << "load " << i << " of pass " << pass;
      EXPECT_EQ(store_banks[i].size(), 32u) << "store " << i << " of pass " << pass;
    }
  }
  EXPECT_EQ(blocks.size(), 32u * 32u);
}

// The FP8 tiles fit sm_90's shared memory, and the P factor keeps the largest P at 256 (e4m3's max is 448).
TEST(CudaSm90Host, Fp8TilesFitAndPFitsE4m3) {
  for (int bucket : {128, 256}) {
    const sm90::Sm90Fp8FwdTile t = sm90::fp8_fwd_tile(bucket);
    EXPECT_EQ(t.head_dim, bucket);
    EXPECT_LE(t.smem_bytes(), sm90::kSmemOptinBytes) << bucket;
    EXPECT_EQ(t.vt_offset(t.stages - 1) + t.kv_bytes(), t.barrier_offset());
    EXPECT_EQ(t.kv_bytes() % 1024, 0);
    EXPECT_EQ(t.q_bytes() % 1024, 0);
  }
  EXPECT_EQ(sm90::fp8_fwd_tile(64).head_dim, 0);
  for (int slack = 0; slack <= 8; ++slack) {
    const float largest = float(1 << slack) * sm90::fp8_p_scale(slack);
    EXPECT_EQ(largest, 256.0f) << slack;
  }
  EXPECT_EQ(sm90::fp8_p_scale(12), 1.0f);
}

#if defined(FLASHATTN_WITH_CUDA)
// ---------------------------------------------------------------------------------------------------
// GPU: the backend forced, against the reference (the catalogue covers the features; these probe the
// tile and stage boundaries of the D = 128 kernel). Skips without a GPU, and with the backend's reason
// where it declines (a device other than sm_90, a build without 90a).

constexpr const char* kBackend = "cuda_sm90";

// The forward of `in` forced onto cuda_sm90; false (the test skipped, with the backend's reason) where it
// declines the call.
bool run_sm90(const AttnInputs& in, FwdOutputs& got) {
  try {
    got = run_forward(in, kBackend, flashattn::Device::cuda(0));
    return true;
  } catch (const flashattn::Error& e) {
    if (e.status() != flashattn::Status::unsupported) throw;
    [&] { GTEST_SKIP() << e.what(); }();
    return false;
  }
}

// A case of the tile-boundary sweeps: 2 sequences of 4 query heads, sq x sk, the dtype, head dim (from
// `dims`) and GQA ratio (4:1 or none) varied by `seed`.
AttnConfig boundary_case(int64_t sq, int64_t sk, bool causal, uint64_t seed, const std::vector<int64_t>& dims) {
  AttnConfig c;
  c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
  c.head_dim = dims[seed % dims.size()];
  c.batch = 2;
  c.heads = 4;
  c.heads_k = (seed % 3) ? 1 : 4;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.causal = causal;
  return c;
}

void expect_sm90_forward(const AttnConfig& cfg, uint64_t seed) {
  SCOPED_TRACE(cfg.name());
  const AttnInputs in = make_inputs(cfg, seed);
  FwdOutputs got;
  if (run_sm90(in, got)) expect_forward_within_criterion(got, reference_forward(in), naive_lowp(in, false), cfg.dtype);
}

// Query counts around the 128-row tile and the 64-row warpgroup half, key counts around the 128-key tile
// and past the two-stage ring (5 key tiles: each stage refilled twice), causal (bottom-right) and not,
// Sq != Sk both ways, GQA 4:1, bf16 and f16, head dims 128, 72, 64, 40, 256, 200, 192 and 160 (72, 40,
// 200 and 160 zero-filled by TMA past the head dim). At D = 64 the ring has four stages: 700 keys refill
// each stage once or twice; at D = 256 the key tile is 80 (79 and 81 keys), at D = 192 112 (113 keys).
TEST(CudaSm90, ForwardAtTileAndStageBoundaries) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 900;
  for (int64_t sq : {1, 63, 65, 128, 129, 300})
    for (int64_t sk : {1, 79, 81, 113, 127, 128, 129, 640, 700})
      for (bool causal : {false, true}) {
        expect_sm90_forward(boundary_case(sq, sk, causal, seed, {128, 72, 64, 40, 256, 200, 192, 160}), seed + 1);
        ++seed;
        if (HasFatalFailure() || IsSkipped()) return;
      }
}

// The persistent grid (one CTA per SM looping over work tiles): more work tiles than any Hopper has SMs
// (2 x 66 heads x 3 query tiles = 396), so each CTA runs several and carries the K/V ring's phases, Q's
// barriers and the ping-pong turns from one to the next; each bucket (O staged in a tile of its own at
// 64 and 128, in Q's at 256), GQA 11:1, keys not a multiple of the tile. Unmasked calls of fewer than 4096
// keys take the grid with tiles dealt statically by default, causal ones with tiles drawn from the call's
// counter (the dynamic order, which also passes the drawn tiles through the scheduler's slots); the varlen
// ones run it where FLASHATTN_SM90_PERSISTENT=1 forces it, and FLASHATTN_SM90_DYNAMIC=0 / 1 forces the
// static / dynamic order (the GPU check runs this test in each way).
TEST(CudaSm90, SeveralWorkTilesPerCta) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 2900;
  for (int64_t head_dim : {128, 64, 256, 192})
    for (bool causal : {false, true}) {
      AttnConfig c;
      c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
      c.head_dim = head_dim;
      c.batch = 2;
      c.heads = 66;
      c.heads_k = 6;
      c.seqlen_q = 300;
      c.seqlen_k = 333;
      c.causal = causal;
      expect_sm90_forward(c, ++seed);
      if (HasFatalFailure() || IsSkipped()) return;
    }
  // varlen with edge clears in many tiles (33 heads x 9 sequences x 3 query tiles = 891 work tiles), and
  // the general instance (softcap), which at D = 128 loops too
  for (bool causal : {false, true}) {
    AttnConfig c;
    c.dtype = flashattn::DType::bf16;
    c.head_dim = 128;
    c.heads = 33;
    c.heads_k = 3;
    c.varlen_q = {300, 0, 129, 1, 257, 63, 300, 200, 17};
    c.varlen_k = {333, 81, 1, 129, 700, 0, 300, 129, 64};
    c.causal = causal;
    c.softcap = causal ? 0.0f : 30.0f;
    expect_sm90_forward(c, ++seed);
    if (HasFatalFailure() || IsSkipped()) return;
  }
}

// Varlen: each sequence's boxes run past its last row into the next sequence's rows (the maps span the
// packed tensors), which the mask must hide and the epilogue must not store. Sequences of 0, 1, 63, 129
// and 300 queries against 0, 1, 81, 128 and 700 keys in shuffled pairings (an empty sequence between full
// ones; a key count past the two-stage ring), causal and not, with softcap and ALiBi on some (the general
// instance), at each bucket.
TEST(CudaSm90, VarlenAndScoreModsAtSequenceEdges) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 1900;
  const std::vector<std::vector<int64_t>> q_lens = {{63, 0, 300, 1, 129}, {129, 1, 0, 300, 63}};
  const std::vector<std::vector<int64_t>> k_lens = {{700, 81, 1, 128, 0}, {1, 128, 700, 81, 129}};
  for (int64_t dim : {64, 128, 256, 96, 192, 136})
    for (size_t pairing = 0; pairing < q_lens.size(); ++pairing)
      for (bool causal : {false, true}) {
        AttnConfig c;
        c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
        c.head_dim = dim;
        c.heads = 4;
        c.heads_k = 2;
        c.varlen_q = q_lens[pairing];
        c.varlen_k = k_lens[pairing];
        c.causal = causal;
        c.softcap = (seed % 3 == 0) ? 30.0f : 0.0f;
        c.alibi = seed % 3 == 1;
        expect_sm90_forward(c, ++seed);
        if (HasFatalFailure() || IsSkipped()) return;
      }
}

// Paged K/V (vLLM's call: a varlen forward with block_table and seqused_k) at each bucket: a page size with
// no TMA box, whose rows the producer copies with cp.async (5), page sizes whose boxes are shorter than the
// key tile (8, 16, 48: a tile spans pages, and at 48 a page spans tiles), one page per tile or more (128,
// 256 where the 80-key tile straddles pages), the unused rows of the pool NaN (the last tile's rows past a
// sequence are cleared or zero-filled before P V), causal and not, GQA; seqused_k over contiguous keys too
// (NaN keys past each used count). FLASHATTN_SM90_PAGED_ROWS=1 runs every paged case on row copies
// (scripts/gpu-check.sh).
TEST(CudaSm90, PagedVarlenAtPageAndTileBoundaries) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 2900;
  const std::vector<int64_t> q_lens = {1, 129, 0, 300, 63};
  const std::vector<int64_t> k_lens = {700, 200, 5, 300, 1};
  for (int64_t dim : {64, 128, 256, 192})
    for (int64_t page : {0, 5, 8, 16, 48, 128, 256})
      for (bool causal : {false, true}) {
        AttnConfig c;
        c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
        c.head_dim = dim;
        c.heads = 4;
        c.heads_k = (seed % 3) ? 1 : 2;
        c.varlen_q = q_lens;
        c.varlen_k = k_lens;
        c.page_size = page;
        c.seqused_k = page == 0 || seed % 2 == 0;
        c.causal = causal;
        c.softcap = (seed % 5 == 0) ? 30.0f : 0.0f;
        SCOPED_TRACE(c.name());
        const AttnInputs in = make_inputs(c, ++seed);
        FwdOutputs got;
        try {
          got = run_forward(in, kBackend, flashattn::Device::cuda(0));
        } catch (const flashattn::Error& e) {
          if (e.status() != flashattn::Status::unsupported) throw;
          const std::string why = e.what();
          if (why.find("compute capability") != std::string::npos || why.find("no sm_90a") != std::string::npos)
            GTEST_SKIP() << why;
          FAIL() << "declined: " << why;
        }
        expect_forward_within_criterion(got, reference_forward(in), naive_lowp(in, false), c.dtype);
        if (HasFatalFailure()) return;
      }
  const flashattn::detail::Backend& b = flashattn::detail::cuda_sm90_backend();
  EXPECT_TRUE(b.paged_varlen_fwd);
}

// Bitwise identical results run to run (a fixed order of every sum; the persistent grid deals its work
// tiles statically, so a tile's CTA does not change either), causal with GQA at
// each bucket.
TEST(CudaSm90, ForwardIsBitwiseRepeatable) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  for (int64_t dim : {64, 128, 256}) {
    AttnConfig c;
    c.dtype = flashattn::DType::bf16;
    c.head_dim = dim;
    c.batch = 2;
    c.heads = 4;
    c.heads_k = 2;
    c.seqlen_q = 300;
    c.seqlen_k = 517;
    c.causal = true;
    SCOPED_TRACE(c.name());
    const AttnInputs in = make_inputs(c, 77);
    FwdOutputs first, second;
    if (!run_sm90(in, first) || !run_sm90(in, second)) return;
    ASSERT_EQ(first.out.nbytes(), second.out.nbytes());
    EXPECT_EQ(std::memcmp(first.out.data(), second.out.data(), first.out.nbytes()), 0);
    ASSERT_EQ(first.lse.nbytes(), second.lse.nbytes());
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.nbytes()), 0);
  }
}

// The backward forced onto cuda_sm90 (its own forward first, as in training): dq, dk and dv against the
// fp64 oracle.
void expect_sm90_backward(const AttnConfig& cfg, uint64_t seed) {
  SCOPED_TRACE(cfg.name());
  const AttnInputs in = make_inputs(cfg, seed);
  BwdOutputs got;
  try {
    const FwdOutputs fwd = run_forward(in, kBackend, flashattn::Device::cuda(0));
    got = run_backward(in, fwd, kBackend, flashattn::Device::cuda(0));
  } catch (const flashattn::Error& e) {
    if (e.status() != flashattn::Status::unsupported) throw;
    GTEST_SKIP() << e.what();
  }
  expect_backward_within_criterion(got, reference_backward(in), naive_lowp(in, true), cfg.dtype);
}

// Query counts around the 64-row step, key counts around the 128-key tile and its 64-key warpgroup
// halves (a CTA with keys for one warpgroup only; several key tiles), causal and not, Sq != Sk both ways,
// GQA 4:1 (dK and dV summed over the group in one CTA), bf16 and f16, head dims 128, 64, 96, 40 and 120
// (the last three zero-filled past the head dim by TMA: dq, dk and dv are stored on the real columns only).
TEST(CudaSm90, BackwardAtTileAndStepBoundaries) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 4100;
  for (int64_t sq : {1, 63, 65, 200})
    for (int64_t sk : {1, 63, 129, 300})
      for (bool causal : {false, true}) {
        expect_sm90_backward(boundary_case(sq, sk, causal, seed, {128, 64, 96, 40, 120}), seed + 1);
        ++seed;
        if (HasFatalFailure() || IsSkipped()) return;
      }
}

// Varlen backward: each sequence's Q, dO, K and V boxes run past its rows into the next sequence's (the
// maps span the packed tensors), which the mask must hide, the dQ reductions and the dK/dV stores must
// skip; empty sequences on either side; a sliding window and GQA 8:1; many steps per CTA (a long query
// sequence against a short key one); softcap and ALiBi on some (the general instance).
TEST(CudaSm90, BackwardVarlenWindowAndGqa) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 5100;
  const std::vector<std::vector<int64_t>> q_lens = {{63, 0, 300, 1, 129}, {700, 1, 0, 65, 63}};
  const std::vector<std::vector<int64_t>> k_lens = {{500, 81, 1, 128, 0}, {64, 128, 300, 81, 129}};
  for (int64_t dim : {64, 128})
    for (size_t pairing = 0; pairing < q_lens.size(); ++pairing)
      for (int mask = 0; mask < 3; ++mask) {
        AttnConfig c;
        c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
        c.head_dim = dim;
        c.heads = 8;
        c.heads_k = mask == 2 ? 1 : 2;
        c.varlen_q = q_lens[pairing];
        c.varlen_k = k_lens[pairing];
        c.causal = mask == 1;
        if (mask == 2) {
          c.window_left = 70;
          c.window_right = 20;
        }
        c.softcap = (seed % 3 == 0) ? 30.0f : 0.0f;  // the general instance (logit transform and its derivative)
        c.alibi = seed % 3 == 1;
        expect_sm90_backward(c, ++seed);
        if (HasFatalFailure() || IsSkipped()) return;
      }
}

// The dispatcher leaves to cuda_sm80 the backward calls it measured faster, head dims up to 64; the others
// (head dims 65-128), deterministic or not, run here by default.
TEST(CudaSm90, BackwardDefersWhereSm80MeasuredFaster) {
  const flashattn::detail::Backend& b = flashattn::detail::cuda_sm90_backend();
  ASSERT_NE(b.defer_bwd, nullptr);
  flashattn::detail::BwdProblem p;
  p.head_dim = 64;
  EXPECT_NE(b.defer_bwd(p).find("head_dim <= 64"), std::string::npos);
  p.head_dim = 40;
  EXPECT_FALSE(b.defer_bwd(p).empty());
  for (int64_t d : {72, 96, 128}) {
    p.head_dim = d;
    EXPECT_EQ(b.defer_bwd(p), "") << d;
  }
  p.deterministic = true;
  EXPECT_EQ(b.defer_bwd(p), "");
  p.head_dim = 64;
  EXPECT_NE(b.defer_bwd(p).find("head_dim <= 64"), std::string::npos);
}

// 8 query heads on 2 kv heads at head dim `dim`, bf16 or f16 by the seed's parity.
AttnConfig gqa4_config(int64_t dim, uint64_t seed) {
  AttnConfig c;
  c.dtype = (seed % 2) ? flashattn::DType::bf16 : flashattn::DType::f16;
  c.head_dim = dim;
  c.heads = 8;
  c.heads_k = 2;
  return c;
}

// Runs the deterministic backward of `c` on cuda_sm90 `runs` times: the first within the criterion, the
// others bitwise equal to it. Returns the backend's reason where it declined the call (empty otherwise).
std::string expect_deterministic_backward(const AttnConfig& c, uint64_t seed, int runs) {
  const AttnInputs in = make_inputs(c, seed);
  std::vector<BwdOutputs> out(static_cast<size_t>(runs));
  try {
    const FwdOutputs fwd = run_forward(in, kBackend, flashattn::Device::cuda(0));
    for (BwdOutputs& r : out) r = run_backward(in, fwd, kBackend, flashattn::Device::cuda(0), /*deterministic=*/true);
  } catch (const flashattn::Error& e) {
    if (e.status() != flashattn::Status::unsupported) throw;
    return e.what();
  }
  expect_backward_within_criterion(out[0], reference_backward(in), naive_lowp(in, true), c.dtype);
  for (int r = 1; r < runs; ++r)
    for (const auto& [x, y] :
         {std::pair{&out[0].dq, &out[r].dq}, std::pair{&out[0].dk, &out[r].dk}, std::pair{&out[0].dv, &out[r].dv}}) {
      EXPECT_EQ(x->nbytes(), y->nbytes());
      if (x->nbytes() == y->nbytes()) EXPECT_EQ(std::memcmp(x->data(), y->data(), x->nbytes()), 0) << "run " << r;
    }
  return {};
}

// The deterministic mode (ordered bulk reductions; with FLASHATTN_SM90_BWD_DQ_BULK=0 the main kernel
// without dQ, then sm80's dQ kernel): within the criterion, and dq, dk, dv bitwise equal from run to run,
// with GQA 4:1 (dK and dV summed over the group), causal and not, at each bucket, varlen included.
TEST(CudaSm90, BackwardDeterministicIsBitwiseRepeatable) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 6100;
  for (int64_t dim : {64, 128})
    for (int shape = 0; shape < 3; ++shape) {
      AttnConfig c = gqa4_config(dim, seed);
      if (shape == 2) {
        c.varlen_q = {300, 0, 65};
        c.varlen_k = {129, 200, 1};
      } else {
        c.batch = 2;
        c.seqlen_q = 300;
        c.seqlen_k = 517;
      }
      c.causal = shape == 1;
      SCOPED_TRACE(c.name());
      if (const std::string declined = expect_deterministic_backward(c, ++seed, 2); !declined.empty())
        GTEST_SKIP() << declined;
      if (HasFatalFailure()) return;
    }
}

// The deterministic mode's ordered reductions where they have something to order: every query tile's dQ
// gets 12 key tiles' additions (1500 keys), under GQA 4:1 (four heads' blocks per CTA step), unmasked,
// causal (each query tile's key tiles a different run) and a sliding window (runs that start above key
// tile 0); three runs bitwise equal, the first within the criterion.
TEST(CudaSm90, BackwardDeterministicWithManyKeyTilesPerQueryTile) {
  FA_SKIP_WITHOUT_GPU(kBackend);
  uint64_t seed = 6200;
  for (int64_t dim : {64, 128})
    for (int shape = 0; shape < 3; ++shape) {
      AttnConfig c = gqa4_config(dim, seed);
      c.batch = 1;
      c.seqlen_q = 700;
      c.seqlen_k = 1500;
      c.causal = shape == 1;
      if (shape == 2) {
        c.window_left = 400;
        c.window_right = 300;
      }
      SCOPED_TRACE(c.name());
      if (const std::string declined = expect_deterministic_backward(c, ++seed, 3); !declined.empty())
        GTEST_SKIP() << declined;
      if (HasFatalFailure()) return;
    }
}

// Declined with a reason that names what is missing, so the dispatcher falls back to cuda_sm80: head dims
// above 128, dropout (runs without a GPU: these reasons come before the device's).
TEST(CudaSm90, BackwardDeclinesWhatItLacks) {
  const flashattn::detail::Backend& b = flashattn::detail::cuda_sm90_backend();
  ASSERT_NE(b.supports_bwd, nullptr);
  ASSERT_NE(b.run_bwd, nullptr);
  flashattn::detail::BwdProblem p;
  p.dtype = flashattn::DType::bf16;
  p.head_dim = 128;
  const std::string base = b.supports_bwd(p);
  if (base.find("no sm_90a") != std::string::npos) GTEST_SKIP() << base;
  const auto declines = [&](flashattn::detail::BwdProblem q, const char* what) {
    const std::string r = b.supports_bwd(q);
    EXPECT_NE(r.find(what), std::string::npos) << "reason: '" << r << "', expected it to name " << what;
  };
  auto q = p;
  q.head_dim = 192;
  declines(q, "head_dim 192");
  q = p;
  q.dropout.p = 0.1f;
  declines(q, "dropout");
}

// The default path picks it ahead of cuda_sm80 (verified on the H200) for every 16-bit forward it supports:
// since session 21 it measured faster than cuda_sm80 at every head dim and length, the 64 bucket below 2k
// tokens included (H100), so it defers none of them; FP8 calls it defers to cuda_fp8 until its native FP8
// forward has run on a GPU, unless FLASHATTN_SM90_FP8=1 (runs without a GPU).
TEST(CudaSm90, PickedByDefaultAheadOfSm80) {
  std::vector<std::string> names;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) names.push_back(b.name);
  const auto sm90_at = std::find(names.begin(), names.end(), kBackend);
  ASSERT_NE(sm90_at, names.end()) << kBackend << " is not registered";
  EXPECT_LT(sm90_at - names.begin(), std::find(names.begin(), names.end(), "cuda_sm80") - names.begin());
  const flashattn::detail::Backend& b = flashattn::detail::cuda_sm90_backend();
  EXPECT_EQ(b.default_decline, nullptr);
  ASSERT_NE(b.defer_fwd, nullptr);
  flashattn::detail::FwdProblem p;
  p.seqlen_q = p.seqlen_k = 1024;
  for (int64_t head_dim : {40, 64, 128, 256}) {
    p.head_dim = head_dim;
    for (flashattn::DType dtype : {flashattn::DType::bf16, flashattn::DType::f16}) {
      p.dtype = dtype;
      EXPECT_TRUE(b.defer_fwd(p).empty()) << head_dim;
    }
  }
  p.dtype = flashattn::DType::fp8_e4m3;
  const char* opt_in = std::getenv("FLASHATTN_SM90_FP8");
  EXPECT_EQ(b.defer_fwd(p).empty(), opt_in != nullptr && std::string(opt_in) == "1");
}
#endif

}  // namespace
}  // namespace fa_test
