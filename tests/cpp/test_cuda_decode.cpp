// cuda_decode beyond the shared KV-cache catalogue (test_backend_kvcache.cpp): CUDA graph capture and
// replay, split counts, long contexts, multi-token GQA, page sizes and every (head-dim bucket, row shape)
// kernel, each against the fp64 oracle of kvcache_case.h; plus host-side checks of the page-size
// division, the cache addressing, the row shapes, the pipeline depth and the split heuristic, which need
// no GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "criterion.h"
#include "gpu_test.h"
#include "kvcache_case.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "common/kvcache.h"
#include "cuda/attn/fast_divmod.h"
#include "cuda/decode/cache_rows.h"
#include "cuda/decode/decode_tile.h"
#include "cuda/decode/split_heuristic.h"
#endif

namespace fa_test {
namespace {

#if defined(FLASHATTN_WITH_CUDA)

namespace dec = flashattn::detail::cuda::decode;

TEST(CudaDecodeHost, FastDivmodMatchesDivision) {
  std::vector<uint32_t> numerators;
  for (uint32_t n = 0; n < 4096; ++n) numerators.push_back(n);
  for (uint32_t k = 0; k < 4096; ++k) numerators.push_back((1u << 31) - 1 - k);
  std::mt19937 rng(5);
  for (int k = 0; k < 20000; ++k) numerators.push_back(rng() >> 1);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (uint32_t d : {511u, 512u, 513u, 1000u, 4096u, 65535u, 65536u, 1u << 20, 3u << 29, (1u << 31) - 1})
    divisors.push_back(d);
  for (uint32_t d : divisors) {
    const dec::FastDivmod f = dec::make_fast_divmod(d);
    for (uint32_t n : numerators) {
      uint32_t q = 0, r = 0;
      f.divmod(n, &q, &r);
      if (q != n / d || r != n % d) {
        ADD_FAILURE() << n << " divmod " << d << " gave (" << q << ", " << r << "), expected (" << n / d << ", "
                      << n % d << ")";
        return;
      }
    }
  }
}

// The kernel's two-step addressing (every block-table entry of a tile first, then the offsets) against
// common/kvcache.h's cache_offset, for every position of paged caches of many page sizes (with padded
// strides and a shuffled block table) and of a contiguous cache selected through a cache row. Paged
// caches whose K and V share strides take the compact path (one byte offset for both), the others the
// general one.
TEST(CudaDecodeHost, CacheRowsMatchCacheOffset) {
  namespace fd = flashattn::detail;
  std::mt19937 rng(9);
  for (bool same_strides : {false, true})
    for (int64_t page : {0, 1, 2, 3, 7, 8, 16, 33, 64, 96, 256, 1000}) {
      const int64_t heads_k = 3, batch = 2;
      const int64_t capacity = page ? (2100 + page - 1) / page * page : 2100;
      fd::KVCacheProblem p;
      p.batch = batch;
      p.heads_k = heads_k;
      fd::CacheView& c = p.cache;
      // Strides padded past the dense layout (row, head), different for K and V unless same_strides.
      c.k_head_stride = 136;
      c.v_head_stride = same_strides ? 136 : 144;
      c.k_row_stride = heads_k * 136 + 8;
      c.v_row_stride = same_strides ? c.k_row_stride : heads_k * 144 + 16;
      std::vector<int32_t> table;
      if (page) {
        const int64_t pages = capacity / page;
        c.page_size = page;
        c.num_blocks = batch * pages + 5;
        c.k_batch_stride = page * c.k_row_stride + 24;
        c.v_batch_stride = same_strides ? c.k_batch_stride : page * c.v_row_stride + 40;
        std::vector<int32_t> blocks(size_t(c.num_blocks));
        for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
        std::shuffle(blocks.begin(), blocks.end(), rng);
        c.block_table_stride = pages + 3;  // rows of the table padded too
        table.assign(size_t(batch * c.block_table_stride), -1);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < pages; ++i)
            table[size_t(b * c.block_table_stride + i)] = blocks[size_t(b * pages + i)];
        c.block_table = table.data();
      } else {
        c.batches = 4;
        c.k_batch_stride = capacity * c.k_row_stride + 8;
        c.v_batch_stride = capacity * c.v_row_stride + 16;
      }
      c.capacity = capacity;
      const std::vector<int32_t> batch_idx = {3, 1};
      if (!page) p.cache_batch_idx = batch_idx.data();
      const dec::FastDivmod divisor = dec::make_fast_divmod(page ? uint32_t(page) : 1u);
      for (int64_t b = 0; b < batch; ++b) {
        const fd::CacheSeq seq = fd::cache_seq(p, b);
        for (int64_t hk = 0; hk < heads_k; ++hk) {
          const dec::CacheRows rows = dec::make_cache_rows(p, seq, b, hk, divisor);
          ASSERT_EQ(rows.paged(), page != 0);
          ASSERT_EQ(rows.compact_paging, page != 0 && same_strides);
          for (int pos = 0; pos < capacity; ++pos) {
            const int32_t block = rows.paged() ? rows.block_of(pos) : 0;
            int64_t k_off = 0, v_off = 0;
            rows.offsets(pos, block, &k_off, &v_off);
            if (rows.compact_paging) {  // the loader's byte offsets, in elements
              const uint32_t in_page = uint32_t(pos % page) * uint32_t(rows.row_bytes);
              k_off = (2 * rows.k_head + int64_t(rows.compact_row_bytes(block, in_page))) / 2;
              v_off = (2 * rows.v_head + int64_t(rows.compact_row_bytes(block, in_page))) / 2;
            }
            const int64_t k_ref = fd::cache_offset(c, seq, b, pos, hk, false);
            const int64_t v_ref = fd::cache_offset(c, seq, b, pos, hk, true);
            if (k_off != k_ref || v_off != v_ref) {
              ADD_FAILURE() << "page " << page << " b " << b << " hk " << hk << " pos " << pos << ": (" << k_off << ", "
                            << v_off << "), cache_offset (" << k_ref << ", " << v_ref << ")";
              return;
            }
            if (rows.paged()) ASSERT_EQ(rows.page_index(pos), uint32_t(pos / page));
          }
        }
      }
    }
}

TEST(CudaDecodeHost, RowShapes) {
  for (int64_t rows = 1; rows <= 300; ++rows) {
    const dec::RowShape s = dec::row_shape(rows);
    const int tile_rows = 16 * dec::row_warps(s);
    EXPECT_GE(dec::row_warps(s) * dec::key_warps(s), 4) << rows;
    // The smallest row tile (16, 32, 64 or 128 rows) that holds the rows; several large tiles beyond 128.
    if (rows <= 128) {
      EXPECT_GE(tile_rows, rows) << rows;
      if (tile_rows > 16) EXPECT_LT(tile_rows / 2, rows) << rows;
    } else {
      EXPECT_EQ(s, dec::RowShape::large) << rows;
    }
  }
  EXPECT_EQ(dec::row_shape(16), dec::RowShape::small);
  EXPECT_EQ(dec::row_shape(17), dec::RowShape::narrow);
  EXPECT_EQ(dec::row_shape(32), dec::RowShape::narrow);
  EXPECT_EQ(dec::row_shape(33), dec::RowShape::medium);
  EXPECT_EQ(dec::row_shape(65), dec::RowShape::large);
}

// Up to 16 rows at head dims <= 128 take the wide shape where the small shape would not stream and the
// wide one fits the device's opt-in shared memory (H100/H200 227 KB; an A100's 163 KB holds it at head
// dim 64 only); everything else keeps row_shape's choice.
TEST(CudaDecodeHost, WideShapeWhereItFits) {
  constexpr size_t kH100 = 232448, kA100 = 166912;
  using dec::RowShape;
  EXPECT_EQ(dec::decode_shape(4, 128, kH100, false), RowShape::wide);
  EXPECT_EQ(dec::decode_shape(4, 128, kH100, true), RowShape::small);
  EXPECT_EQ(dec::decode_shape(16, 64, kH100, false), RowShape::wide);
  EXPECT_EQ(dec::decode_shape(4, 256, kH100, false), RowShape::small);
  EXPECT_EQ(dec::decode_shape(17, 128, kH100, false), RowShape::narrow);
  EXPECT_EQ(dec::decode_shape(100, 64, kH100, false), RowShape::large);
  EXPECT_EQ(dec::decode_shape(4, 128, kA100, false), RowShape::small);
  EXPECT_EQ(dec::decode_shape(4, 64, kA100, false), RowShape::wide);
  using D128Wide = dec::DecodeTile<128, 1, 8>;
  EXPECT_EQ(D128Wide::kBlockN, 128);
  EXPECT_EQ(D128Wide::kStages, 3);
  EXPECT_EQ(D128Wide::kSmemBytes, size_t(4096 + 3 * 65536));
  EXPECT_LE(D128Wide::kSmemBytes, kH100);
  EXPECT_GT(D128Wide::kSmemBytes, kA100);
}

// On an sm_90 device with the library's sm_90a kernels, more than 32 rows at head dims <= 128 take the
// warpgroup shape (64-row tiles, wgmma); everything else keeps the mma.sync shapes.
TEST(CudaDecodeHost, WarpgroupShapeAboveThirtyTwoRows) {
  constexpr size_t kH100 = 232448;
  using dec::RowShape;
  for (int64_t rows = 1; rows <= 300; ++rows)
    for (int bucket : {64, 128, 256})
      for (bool small_streams : {false, true}) {
        const RowShape plain = dec::decode_shape(rows, bucket, kH100, small_streams);
        const RowShape s = dec::decode_shape(rows, bucket, kH100, small_streams, true);
        EXPECT_EQ(s, rows > 32 && bucket <= 128 ? RowShape::warpgroup : plain) << rows << " " << bucket;
      }
  using D128Warpgroup = dec::WarpgroupTile<128>;
  EXPECT_EQ(D128Warpgroup::kRows, 64);
  EXPECT_EQ(D128Warpgroup::kBlockN, 64);
  EXPECT_EQ(D128Warpgroup::kStages, 3);
  EXPECT_EQ(D128Warpgroup::kSmemBytes, size_t(16384 + 3 * 32768));
  EXPECT_EQ(dec::decode_smem_bytes(128, RowShape::warpgroup), D128Warpgroup::kSmemBytes);
  EXPECT_EQ(dec::decode_smem_bytes(256, RowShape::warpgroup), size_t(0));  // no such kernel
}

// Every instantiation must fit an sm_80 block's opt-in shared memory (the backend runs from sm_80 on),
// with about 96 KB of K/V in its pipeline and at least two stages.
TEST(CudaDecodeHost, SharedMemoryFitsSm80) {
  constexpr size_t kA100 = 166912;  // opt-in shared memory per block on sm_80
  using dec::RowShape;
  for (int bucket : {64, 128, 256})
    for (RowShape s : {RowShape::small, RowShape::narrow, RowShape::medium, RowShape::large})
      EXPECT_LE(dec::decode_smem_bytes(bucket, s), kA100) << bucket << " " << int(s);
  using D128Small = dec::DecodeTile<128, 1, 4>;
  EXPECT_EQ(D128Small::kStages, 3);
  EXPECT_EQ(D128Small::kSmemBytes, size_t(4096 + 3 * 32768));
  EXPECT_EQ((dec::DecodeTile<256, 1, 4>::kStages), 2);  // 64 KB tiles
  EXPECT_EQ((dec::DecodeTile<64, 8, 1>::kStages), 4);   // 16 KB tiles: capped at 4
}

// FP8 caches (decode_tile.h, kFp8Cache): stages of e4m3 bytes (half a 16-bit tile) plus one 16-bit work
// tile, within the 16-bit kernels' ~96 KB budget, so that the same blocks per SM fit; every shape fits an
// sm_80 block, the wide one an sm_90 block; the copies move 16 elements per 16-byte chunk.
TEST(CudaDecodeHost, Fp8CacheTilesFit) {
  constexpr size_t kH100 = 232448, kA100 = 166912;
  using dec::RowShape;
  for (int bucket : {64, 128, 256})
    for (RowShape s : {RowShape::small, RowShape::narrow, RowShape::medium, RowShape::large}) {
      EXPECT_LE(dec::decode_smem_bytes(bucket, s, true), kA100) << bucket << " " << int(s);
      EXPECT_LE(dec::decode_smem_bytes(bucket, s, true), dec::decode_smem_bytes(bucket, s) + 16384)
          << bucket << " " << int(s);
    }
  for (int bucket : {64, 128})
    for (RowShape s : {RowShape::wide, RowShape::warpgroup})
      EXPECT_LE(dec::decode_smem_bytes(bucket, s, true), kH100) << bucket << " " << int(s);
  using Small = dec::DecodeTile<128, 1, 4, false, true>;
  EXPECT_EQ(Small::kCacheChunks, 8);
  EXPECT_EQ(Small::kStageBytes, 16384);
  EXPECT_EQ(Small::kStages, 4);
  EXPECT_EQ(Small::kSmemBytes, size_t(4096 + 4 * 16384 + 32768));
  EXPECT_EQ(Small::kMinBlocksPerSm, (dec::DecodeTile<128, 1, 4>::kMinBlocksPerSm));
  using Wide = dec::DecodeTile<128, 1, 8, false, true>;
  EXPECT_EQ(Wide::kStages, 3);
  EXPECT_EQ(Wide::kSmemBytes, size_t(4096 + 3 * 32768 + 65536));
  using Warpgroup = dec::WarpgroupTile<128, true>;
  EXPECT_EQ(Warpgroup::kSmemBytes % 1024, size_t(0));
  EXPECT_EQ((dec::DecodeTile<256, 1, 4, false, true>::kCacheChunks), 16);
}

TEST(CudaDecodeHost, SplitHeuristic) {
  dec::SplitInputs in;
  in.block_n = 64;
  in.rows = 4;
  in.sm_count = 132;
  in.blocks_per_sm = 2;
  in.blocks = 8;  // batch 1, 8 kv heads
  in.max_keys = 32768;
  // one wave of resident blocks: 132 * 2 / 8 = 33 splits
  EXPECT_EQ(dec::choose_num_splits(in), 33);
  // a streaming call (one packed row per warp) takes one block per SM: 132 / 8 = 16
  in.streaming = true;
  EXPECT_EQ(dec::choose_num_splits(in), 16);
  in.streaming = false;
  // a short context: at least block_n keys per split, 1024 / 64 = 16
  in.max_keys = 1024;
  EXPECT_EQ(dec::choose_num_splits(in), 16);
  // 128 packed rows need 128 keys per split: 1024 / 128 = 8
  in.rows = 128;
  EXPECT_EQ(dec::choose_num_splits(in), 8);
  // no keys at all still runs one split
  in.max_keys = 0;
  EXPECT_EQ(dec::choose_num_splits(in), 1);
  // blocks that fill every resident slot are not split; half of them are split in two
  in.rows = 4;
  in.max_keys = 32768;
  in.blocks = 265;
  EXPECT_EQ(dec::choose_num_splits(in), 1);
  in.blocks = 132;
  EXPECT_EQ(dec::choose_num_splits(in), 2);
  // streaming: a block for every SM is not split
  in.streaming = true;
  EXPECT_EQ(dec::choose_num_splits(in), 1);
  in.blocks = 66;
  EXPECT_EQ(dec::choose_num_splits(in), 2);
  in.streaming = false;
  // at most kMaxSplits
  in.blocks = 1;
  EXPECT_EQ(dec::choose_num_splits(in), dec::kMaxSplits);
  // an explicit request wins, clamped to kMaxSplits
  in.requested = 7;
  EXPECT_EQ(dec::choose_num_splits(in), 7);
  in.requested = 1000;
  EXPECT_EQ(dec::choose_num_splits(in), dec::kMaxSplits);
}

// The cache after the call: exactly the reference's, within one unit of rounding where rotary rotated
// the new keys (the rotation may round differently).
testing::AssertionResult caches_match(const char* what, const HostTensor& got, const HostTensor& ref, bool rotary) {
  const double eps = got.dtype() == DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.get(i), r = ref.get(i);
    const double tol = rotary ? eps * std::max(1.0, std::fabs(r)) : 0.0;
    if (!(std::fabs(g - r) <= tol))
      return testing::AssertionFailure() << what << "[" << i << "] = " << g << ", reference " << r;
  }
  return testing::AssertionSuccess();
}

void expect_outputs_match(const KVConfig& cfg, const KVOutputs& got, const KVOracle& oracle) {
  EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, cfg.dtype)) << cfg.name();
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32)) << cfg.name();
  EXPECT_TRUE(caches_match("k_cache", got.k_cache, oracle.appended.k_cache, cfg.rotary_dim > 0)) << cfg.name();
  EXPECT_TRUE(caches_match("v_cache", got.v_cache, oracle.appended.v_cache, false)) << cfg.name();
}

void expect_matches_oracle(const KVConfig& cfg, uint64_t seed) {
  const KVInputs in = make_kv_inputs(cfg, seed);
  const KVOracle oracle = kv_oracle(in);
  expect_outputs_match(cfg, run_kvcache(in, "cuda_decode", Device::cuda(0)), oracle);
}

KVConfig decode_config(int64_t heads, int64_t heads_k, int64_t head_dim, int64_t seqlen_q, int64_t capacity,
                       std::vector<int64_t> cache_seqlens) {
  KVConfig c;
  c.dtype = DType::bf16;
  c.batch = int64_t(cache_seqlens.size());
  c.heads = heads;
  c.heads_k = heads_k;
  c.head_dim = head_dim;
  c.seqlen_q = seqlen_q;
  c.seqlen_new = seqlen_q;
  c.causal = seqlen_q > 1;
  c.capacity = capacity;
  c.cache_seqlens = std::move(cache_seqlens);
  return c;
}

// The combine merges the splits in split order: the same bits on every call (rows 4: one per warp of the
// small shape; rows 12). With a new token appended (rotary on), every call runs the whole chain of
// kernels, append, attention and combine, the last two launched early on sm_90 (programmatic dependent
// launch); the outputs must also match the oracle, which they would not if the attention read the cache
// or q before the append had written them, or the combine the partials before the attention had.
TEST(CudaDecode, SplitCombineIsRepeatable) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  for (int64_t group : {4, 12}) {
    KVConfig cfg = decode_config(8 * group, 8, 128, 1, 4096, {4000, 3999, 1});
    cfg.num_splits = 33;
    cfg.rotary_dim = 128;
    const KVInputs in = make_kv_inputs(cfg, 40 + uint64_t(group));
    const KVOutputs first = run_kvcache(in, "cuda_decode", Device::cuda(0));
    expect_outputs_match(cfg, first, kv_oracle(in));
    for (int rep = 0; rep < 5; ++rep) {
      const KVOutputs again = run_kvcache(in, "cuda_decode", Device::cuda(0));
      EXPECT_TRUE(bitwise_equal(again.out, first.out)) << "group " << group << " rep " << rep;
      EXPECT_TRUE(bitwise_equal(again.lse, first.lse)) << "group " << group << " rep " << rep;
    }
  }
}

TEST(CudaDecode, SplitCountsAgreeWithReference) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  KVConfig cfg = decode_config(32, 8, 128, 1, 4096, {4000, 1234});
  const KVInputs in = make_kv_inputs(cfg, 11);
  const KVOracle oracle = kv_oracle(in);
  for (int splits : {1, 2, 3, 8, 33, 128}) {
    KVInputs run = in;
    run.cfg.num_splits = splits;
    expect_outputs_match(run.cfg, run_kvcache(run, "cuda_decode", Device::cuda(0)), oracle);
  }
}

TEST(CudaDecode, SplitsWithWindowAlibiSoftcap) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  KVConfig cfg = decode_config(16, 4, 128, 4, 2048, {1900, 30, 700});
  cfg.window_left = 300;
  cfg.window_right = 0;
  for (int splits : {1, 4}) {
    cfg.num_splits = splits;
    expect_matches_oracle(cfg, 12);
  }
  cfg.window_left = -1;
  cfg.alibi = true;
  cfg.softcap = 30.0f;
  for (int splits : {1, 5}) {
    cfg.num_splits = splits;
    expect_matches_oracle(cfg, 13);
  }
}

TEST(CudaDecode, LongContextOneHeadGroup) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  // 1 x 32k, one kv head with 8 query heads (chosen splits: the maximum, 128)
  expect_matches_oracle(decode_config(8, 1, 128, 1, 32768, {32767}), 14);
  // 16 query tokens appended at the end of a 32k context: 128 packed rows
  KVConfig multi = decode_config(8, 1, 128, 16, 32768, {32768 - 16});
  multi.dtype = DType::f16;
  expect_matches_oracle(multi, 15);
}

TEST(CudaDecode, MultiTokenGqa) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  for (int64_t sq : {8, 16})
    for (int64_t heads : {32, 64}) {
      KVConfig cfg = decode_config(heads, 8, 128, sq, 1024, {900, 257});
      if (sq == 16) {
        cfg.rotary_dim = 128;
        cfg.rotary_interleaved = false;
      }
      expect_matches_oracle(cfg, 16 + uint64_t(sq + heads));
    }
}

TEST(CudaDecode, PageSizes) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  for (int64_t page : {1, 16, 256}) {
    KVConfig cfg = decode_config(32, 8, 128, 2, 1024, {1000, 0, 513});
    cfg.page_size = page;
    expect_matches_oracle(cfg, 20 + uint64_t(page));
    cfg.leftpad = true;
    cfg.seqlen_q = 1;
    cfg.seqlen_new = 1;
    cfg.causal = false;
    expect_matches_oracle(cfg, 30 + uint64_t(page));
  }
}

// One split over thousands of keys, so that every pipeline (2 to 4 stages) wraps its ring of buffers
// many times, for the row shapes of head dims 64, 128 and 256, on paged caches (page sizes that do and
// do not divide a tile, with leftpad: the block-table entries of a tile are read one tile ahead of its
// copies, and the lines of the tile after that prefetched) and a contiguous one.
TEST(CudaDecode, LongSplitsWrapThePipeline) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  struct Case {
    int64_t head_dim, group, sq, page;  // rows = sq * group
  };
  for (const Case& c : {Case{256, 4, 1, 16}, Case{256, 8, 3, 0}, Case{256, 8, 8, 7}, Case{256, 8, 16, 1},
                        Case{128, 8, 16, 16}, Case{128, 4, 16, 96}, Case{64, 8, 16, 3}, Case{128, 4, 8, 1}}) {
    const int64_t capacity = c.page ? (3072 + c.page - 1) / c.page * c.page : 3072;
    KVConfig cfg = decode_config(2 * c.group, 2, c.head_dim, c.sq, capacity, {3000, 1700});
    cfg.page_size = c.page;
    cfg.leftpad = c.page != 0;
    cfg.num_splits = 1;
    expect_matches_oracle(cfg, 60 + uint64_t(c.head_dim + c.sq + c.page));
  }
}

// Every (head-dim bucket, row shape) instantiation: rows = seqlen_q * group = 4 (small), 20 and 32
// (narrow), 40 and 64 (medium), 128 (large) and 256 (two large row tiles); on an sm_90 device 40-256 rows
// at head dims <= 128 run the warpgroup shape (one to four 64-row tiles, padding rows at 40). Odd head dims
// inside each bucket. scripts/gpu-check.sh also runs the decode tests with FLASHATTN_DECODE_WGMMA=0.
TEST(CudaDecode, EveryKernelShape) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  for (int64_t head_dim : {40, 64, 96, 128, 200, 256})
    for (auto [sq, heads] :
         {std::pair<int64_t, int64_t>{1, 32}, {5, 32}, {8, 32}, {10, 32}, {16, 32}, {16, 64}, {32, 64}}) {
      if (sq == 32 && head_dim != 128 && head_dim != 256) continue;
      KVConfig cfg = decode_config(heads, 8, head_dim, sq, 512, {300, 77});
      cfg.dtype = head_dim == 128 ? DType::f16 : DType::bf16;
      expect_matches_oracle(cfg, 40 + uint64_t(head_dim + sq));
    }
}

// Device buffers of one call and the KVCacheParams pointing at them (as run_kvcache, but kept alive so
// that a captured graph can be replayed on them).
struct DeviceCall {
  DeviceTensor q, k_cache, v_cache, k_new, v_new, cos, sin, lens, table, out, lse;
  flashattn::KVCacheParams params;

  explicit DeviceCall(const KVInputs& in) {
    const Device d = Device::cuda(0);
    const KVConfig& c = in.cfg;
    q = DeviceTensor(in.q, d);
    k_cache = DeviceTensor(in.k_cache, d);
    v_cache = DeviceTensor(in.v_cache, d);
    k_new = DeviceTensor(in.k_new, d);
    v_new = DeviceTensor(in.v_new, d);
    cos = DeviceTensor(in.rotary_cos, d);
    sin = DeviceTensor(in.rotary_sin, d);
    lens = DeviceTensor(in.cache_seqlens, d);
    table = DeviceTensor(in.block_table, d);
    HostTensor o(c.dtype, in.q.shape()), l(DType::f32, {c.batch, c.heads, c.seqlen_q});
    o.poison();
    l.poison();
    out = DeviceTensor(o, d);
    lse = DeviceTensor(l, d);
    params.q = q.view();
    params.k_cache = k_cache.view();
    params.v_cache = v_cache.view();
    params.k_new = k_new.view();
    params.v_new = v_new.view();
    params.rotary_cos = cos.view();
    params.rotary_sin = sin.view();
    params.rotary_interleaved = c.rotary_interleaved;
    params.cache_seqlens = lens.view();
    params.block_table = table.view();
    params.out = out.view();
    params.softmax_lse = lse.view();
    params.options.causal = c.causal;
    params.options.backend = "cuda_decode";
    params.num_splits = int(c.num_splits);
  }

  // NaN into out and LSE (0xFF bytes), so a replay that writes nothing cannot pass.
  void poison(cudaStream_t stream, const KVInputs& in) {
    cuda_ok(cudaMemsetAsync(out.view().data, 0xFF, in.q.nbytes(), stream), "poison out");
    cuda_ok(cudaMemsetAsync(lse.view().data, 0xFF, size_t(in.cfg.batch * in.cfg.heads * in.cfg.seqlen_q) * 4, stream),
            "poison lse");
  }

  KVOutputs download() const {
    return KVOutputs{out.download(), lse.download(), k_cache.download(), v_cache.download()};
  }
};

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Memory-allocation nodes of a captured graph.
size_t allocation_nodes(cudaGraph_t graph) {
  size_t count = 0;
  cuda_ok(cudaGraphGetNodes(graph, nullptr, &count), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  cuda_ok(cudaGraphGetNodes(graph, nodes.data(), &count), "cudaGraphGetNodes");
  size_t allocs = 0;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type{};
    cuda_ok(cudaGraphNodeGetType(n, &type), "cudaGraphNodeGetType");
    allocs += type == cudaGraphNodeTypeMemAlloc;
  }
  return allocs;
}

// A caller's workspace allocator (KVCacheParams::workspace_allocator) as a framework's caching allocator
// behaves for its stream: slices of an arena reserved up front (cudaMalloc is not allowed while a stream
// is being captured), valid until the allocator goes; nullptr once the arena is used up.
struct TestAllocator {
  unsigned char* arena = nullptr;
  size_t capacity = size_t(64) << 20, used = 0;
  std::vector<size_t> requests;
  TestAllocator() { cuda_ok(cudaMalloc(reinterpret_cast<void**>(&arena), capacity), "arena"); }
  ~TestAllocator() { cudaFree(arena); }
  std::function<void*(size_t)> fn() {
    return [this](size_t bytes) -> void* {
      requests.push_back(bytes);
      // 16 bytes past a 256-byte boundary: the backend aligns the memory itself (its parts are 256-byte
      // aligned for 16-byte loads).
      const size_t start = (used + 255) / 256 * 256 + 16;
      if (start + bytes > capacity) return nullptr;
      used = start + bytes;
      return arena + start;
    };
  }
};

// A paged decode step with new tokens, rotary (NeoX, partial) and causal: every kernel of the call and
// the workspace (rotated q, split partials) run inside the graph, with programmatic dependent launch on
// sm_90: append, attention and, with more than one split, combine. With `caller_workspace` the scratch
// memory comes from the caller's allocator and the graph holds no allocation node; without, from
// cudaMallocAsync (allocation nodes in the graph).
void check_graph_capture_replay(int64_t tokens, int splits, bool caller_workspace = false) {
  KVConfig cfg = decode_config(32, 8, 128, tokens, 2048, {1500, 3, 800, 2000 - 2});
  cfg.page_size = 16;
  cfg.rotary_dim = 64;
  cfg.rotary_interleaved = false;
  cfg.num_splits = splits;
  SCOPED_TRACE(cfg.name() + (caller_workspace ? " caller workspace" : ""));
  const KVInputs in = make_kv_inputs(cfg, 50 + uint64_t(tokens));
  DeviceCall call(in);
  TestAllocator allocator;
  if (caller_workspace) call.params.workspace_allocator = allocator.fn();
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  flashattn::forward_kvcache(call.params, stream);
  cuda_ok(cudaStreamSynchronize(stream), "direct call");
  const KVOutputs direct = call.download();

  cudaGraph_t graph = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    flashattn::forward_kvcache(call.params, stream);
  } catch (const flashattn::Error& e) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    FAIL() << "forward_kvcache during capture: " << e.what();
  }
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  if (caller_workspace) {
    EXPECT_EQ(allocation_nodes(graph), 0u);
    EXPECT_EQ(allocator.requests.size(), 2u);  // the direct call and the captured one, once each
  } else {
    EXPECT_GT(allocation_nodes(graph), 0u);
  }
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  // Replay: the append rewrites the same positions with the same values, the outputs come out the same.
  call.poison(stream, in);
  cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  cuda_ok(cudaStreamSynchronize(stream), "replay");
  const KVOutputs replay = call.download();
  EXPECT_TRUE(same_bytes(replay.out, direct.out));
  EXPECT_TRUE(same_bytes(replay.lse, direct.lse));
  EXPECT_TRUE(same_bytes(replay.k_cache, direct.k_cache));
  EXPECT_TRUE(same_bytes(replay.v_cache, direct.v_cache));
  expect_outputs_match(cfg, direct, kv_oracle(in));

  // New lengths written to the device between replays: the graph reads them on the device.
  const std::vector<int64_t> lens = {700, 2046, 0, 64};
  KVInputs next = in;
  next.cfg.cache_seqlens = lens;
  next.cache_seqlens = i32_tensor(std::vector<int32_t>(lens.begin(), lens.end()));
  next.k_cache = direct.k_cache;
  next.v_cache = direct.v_cache;
  cuda_ok(cudaMemcpyAsync(call.lens.view().data, next.cache_seqlens.data(), next.cache_seqlens.nbytes(),
                          cudaMemcpyHostToDevice, stream),
          "new cache_seqlens");
  call.poison(stream, in);
  cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  cuda_ok(cudaStreamSynchronize(stream), "replay with new lengths");
  expect_outputs_match(next.cfg, call.download(), kv_oracle(next));

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CudaDecode, GraphCaptureReplayMatchesDirectCall) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  check_graph_capture_replay(2, 0);
  check_graph_capture_replay(1, 16);
  check_graph_capture_replay(1, 16, true);
  check_graph_capture_replay(2, 0, true);
}

// The caller's allocator is asked only when the call needs scratch memory (splits or rotary), for enough
// of it; an allocator that returns nothing fails the call with out_of_memory, naming it, before any
// kernel runs: the cache keeps its contents (no append) and out its poison.
TEST(CudaDecode, CallerWorkspaceAllocator) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  KVConfig cfg = decode_config(32, 8, 128, 1, 4096, {4000, 1234});
  cfg.num_splits = 8;
  const KVInputs in = make_kv_inputs(cfg, 81);
  {
    DeviceCall call(in);
    TestAllocator allocator;
    call.params.workspace_allocator = allocator.fn();
    flashattn::forward_kvcache(call.params, nullptr);
    device_synchronize(Device::cuda(0));
    expect_outputs_match(cfg, call.download(), kv_oracle(in));
    ASSERT_EQ(allocator.requests.size(), 1u);
    // 8 splits x 2 sequences x 8 kv heads x 4 rows x (128 outputs + 1 LSE) fp32 at least.
    EXPECT_GE(allocator.requests[0], size_t(8 * 2 * 8 * 4 * 129 * 4));
  }
  {
    KVInputs one = in;
    one.cfg.num_splits = 1;  // no partials, no rotary: nothing to allocate
    DeviceCall call(one);
    TestAllocator allocator;
    call.params.workspace_allocator = allocator.fn();
    flashattn::forward_kvcache(call.params, nullptr);
    device_synchronize(Device::cuda(0));
    expect_outputs_match(one.cfg, call.download(), kv_oracle(one));
    EXPECT_TRUE(allocator.requests.empty());
  }
  {
    const KVInputs ain = make_kv_inputs(cfg, 82);  // with the token decode_config appends: it must not land
    DeviceCall call(ain);
    call.params.workspace_allocator = [](size_t) -> void* { return nullptr; };
    try {
      flashattn::forward_kvcache(call.params, nullptr);
      ADD_FAILURE() << "expected out_of_memory";
    } catch (const flashattn::Error& e) {
      EXPECT_EQ(e.status(), flashattn::Status::out_of_memory);
      EXPECT_NE(std::string(e.what()).find("workspace_allocator"), std::string::npos) << e.what();
    }
    device_synchronize(Device::cuda(0));
    const KVOutputs after = call.download();
    EXPECT_TRUE(same_bytes(after.k_cache, ain.k_cache));
    EXPECT_TRUE(same_bytes(after.v_cache, ain.v_cache));
    HostTensor poisoned(cfg.dtype, ain.q.shape());
    poisoned.poison();
    EXPECT_TRUE(same_bytes(after.out, poisoned));
  }
}

// A paged V cache with padded rows (strides unlike K's) goes through the tile loader's general paged
// path, K and V with equal strides through the compact one (cache_rows.h): the same values, with a new
// token appended through each and the same split count, give bitwise the same outputs and appended
// rows; the general path's outputs also match the oracle. (DeviceCall passes no cache_leftpad or
// cache_batch_idx: the configurations use neither.)
TEST(CudaDecode, PagedKvWithDifferentStridesMatchesCompactPath) {
  FA_SKIP_WITHOUT_GPU("cuda_decode");
  for (auto [page, head_dim] : {std::pair<int64_t, int64_t>{16, 128}, {7, 256}, {3, 64}}) {
    KVConfig cfg = decode_config(32, 8, head_dim, 1, 1022 / page * page, {1000, 0, 513});
    cfg.page_size = page;
    cfg.num_splits = 3;  // the same split count for both layouts (the heuristic may differ between them)
    const KVInputs in = make_kv_inputs(cfg, 70 + uint64_t(page + head_dim));
    DeviceCall compact(in);
    flashattn::forward_kvcache(compact.params, nullptr);
    device_synchronize(Device::cuda(0));
    const KVOutputs expected = compact.download();

    const std::vector<int64_t>& shape = in.v_cache.shape();  // (num_blocks, page, heads_k, head_dim)
    const int64_t rows = shape[0] * shape[1] * shape[2], dim = shape[3], padded_dim = dim + 8;
    HostTensor padded(in.v_cache.dtype(), {shape[0], shape[1], shape[2], padded_dim});
    padded.fill(0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) padded.set(r * padded_dim + d, in.v_cache.get(r * dim + d));
    const DeviceTensor v_padded(padded, Device::cuda(0));
    DeviceCall general(in);
    general.params.v_cache = v_padded.view();
    general.params.v_cache.shape[3] = dim;  // the strides stay those of the padded rows
    flashattn::forward_kvcache(general.params, nullptr);
    device_synchronize(Device::cuda(0));
    KVOutputs got = general.download();
    const HostTensor v_after = v_padded.download();  // the appended token went into the padded cache
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) got.v_cache.set(r * dim + d, v_after.get(r * padded_dim + d));
    EXPECT_TRUE(same_bytes(got.out, expected.out)) << "page " << page;
    EXPECT_TRUE(same_bytes(got.lse, expected.lse)) << "page " << page;
    EXPECT_TRUE(same_bytes(got.v_cache, expected.v_cache)) << "page " << page;
    expect_outputs_match(cfg, got, kv_oracle(in));
  }
}

#else

TEST(CudaDecode, NotBuilt) { GTEST_SKIP() << "built without CUDA: cuda_decode not compiled"; }

#endif

}  // namespace
}  // namespace fa_test
