// cuda_sm70 (Volta tensor cores, mma.sync.m8n8k4). Two parts:
//  * host checks: a model of the instruction built from the PTX ISA's per-lane fragment tables, fed the
//    operands each lane loads (sm70/mma884_layout.h), must give the plain matrix product at the
//    coordinates the kernel reads its accumulators from; the tile shapes fit sm_70's shared memory;
//  * GPU checks against the fp64 reference (skipped without a GPU): forward and backward tile-boundary
//    sweeps per head-dim bucket, dropout, masks, varlen, bitwise repeatability of the backward, and the
//    same calls through the embedded sm_70 image's PTX (FLASHATTN_SM70_IMAGE=1), the path a Volta GPU takes.
// The shared forward and backward catalogues (test_backend_forward/backward.cpp) run on this backend too.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attention_case.h"
#include "backend_match.h"
#include "criterion.h"
#include "cuda/attn/head_dim.h"
#include "cuda/sm70/bwd_tile.h"
#include "cuda/sm70/fwd_tile.h"
#include "cuda/sm70/mma884_layout.h"
#include "gpu_test.h"
#include "kvcache_case.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

namespace sm70 = flashattn::detail::cuda::sm70;

// ---------------------------------------------------------------------------------------------------
// Host: the m8n8k4 model

// One warp-wide mma.sync.m8n8k4 with f32 accumulators as the PTX ISA specifies it: quadpair q (lanes
// 4q..4q+3 and 4q+16..4q+19) multiplies the A and B its lanes hold and hands lane l of it the accumulators
// c_i = C_q[row][col], row = (l & 1) + (i & 2) + 4 (l >= 16), col = (i & 4) + (l & 2) + (i & 1).
// a[l][j]: lane l's A elements a0..a3 (row-major A: row l % 4 + 4 (l >= 16), column j).
// b[l][j]: lane l's B elements b0..b3; col-major B: row j, column l % 4 + 4 (l >= 16); row-major B:
// row l % 4, column j + 4 (l >= 16).
using LaneQuad = std::array<std::array<float, 4>, 32>;
using LaneAcc = std::array<std::array<float, 8>, 32>;

LaneAcc model_mma884(const LaneQuad& a, const LaneQuad& b, bool b_col_major) {
  LaneAcc c{};
  for (int q = 0; q < 4; ++q) {
    float A[8][4] = {}, B[4][8] = {};
    for (int half = 0; half < 2; ++half)
      for (int t = 0; t < 4; ++t) {
        const int lane = 4 * q + 16 * half + t;
        for (int j = 0; j < 4; ++j) {
          A[t + 4 * half][j] = a[lane][j];
          if (b_col_major)
            B[j][t + 4 * half] = b[lane][j];
          else
            B[t][j + 4 * half] = b[lane][j];
        }
      }
    for (int half = 0; half < 2; ++half)
      for (int t = 0; t < 4; ++t) {
        const int lane = 4 * q + 16 * half + t;
        for (int i = 0; i < 8; ++i) {
          const int row = (lane & 1) + (i & 2) + 4 * half, col = (i & 4) + (lane & 2) + (i & 1);
          float sum = 0.0f;
          for (int k = 0; k < 4; ++k) sum += A[row][k] * B[k][col];
          c[lane][i] = sum;
        }
      }
  }
  return c;
}

// Small integers: every product and sum is exact in float.
float value(int r, int c, int salt) { return float((r * 7 + c * 3 + salt) % 11 - 5); }

// S = Q K^T over one k4 step, as fwd_kernel.cuh loads it: lane l's A is Q row a_row(l), its (col-major) B
// is K row b_col(l); accumulator i lands at S[c_row(l, i)][c_col(l, i)].
TEST(CudaSm70Layout, QKProductLandsWhereTheKernelReadsIt) {
  LaneQuad a{}, b{};
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j) {
      a[lane][j] = value(sm70::a_row(lane), j, 1);  // Q[row][k]
      b[lane][j] = value(sm70::b_col(lane), j, 2);  // K[key][k]
    }
  const LaneAcc c = model_mma884(a, b, true);
  int seen[16][16] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i) {
      const int row = sm70::c_row(lane, i), key = sm70::c_col(lane, i);
      ASSERT_TRUE(row >= 0 && row < 16 && key >= 0 && key < 16);
      float expect = 0.0f;
      for (int k = 0; k < 4; ++k) expect += value(row, k, 1) * value(key, k, 2);
      EXPECT_EQ(c[lane][i], expect) << "lane " << lane << " accumulator " << i;
      ++seen[row][key];
    }
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) EXPECT_EQ(seen[r][k], 1) << "S[" << r << "][" << k << "]";
}

// O = P V over one k4 step: lane l's A is P row a_row(l) (keys 0..3), its row-major B is V row b_row_k(l),
// dims b_row_col0(l) .. + 3; accumulator i lands at O[c_row(l, i)][c_col(l, i)].
TEST(CudaSm70Layout, PVProductLandsWhereTheKernelReadsIt) {
  LaneQuad a{}, b{};
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j) {
      a[lane][j] = value(sm70::a_row(lane), j, 3);                             // P[row][key]
      b[lane][j] = value(sm70::b_row_k(lane), sm70::b_row_col0(lane) + j, 4);  // V[key][dim]
    }
  const LaneAcc c = model_mma884(a, b, false);
  int seen[16][16] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i) {
      const int row = sm70::c_row(lane, i), dim = sm70::c_col(lane, i);
      float expect = 0.0f;
      for (int k = 0; k < 4; ++k) expect += value(row, k, 3) * value(k, dim, 4);
      EXPECT_EQ(c[lane][i], expect) << "lane " << lane << " accumulator " << i;
      ++seen[row][dim];
    }
  for (int r = 0; r < 16; ++r)
    for (int d = 0; d < 16; ++d) EXPECT_EQ(seen[r][d], 1) << "O[" << r << "][" << d << "]";
}

// The kernel's row reductions and its P staging rely on: a lane's accumulators lie on rows c_row(l, 0)
// (i & 2 = 0) and c_row(l, 0) + 2 (i & 2 = 2); the lanes holding a row are those that differ only in the
// bits of kRowShuffle1 and kRowShuffle2; accumulators i, i + 1 (i even) are adjacent columns; and the LSE
// writer (c_col(l, 0) == 0) is one lane per row.
TEST(CudaSm70Layout, RowOwnershipMatchesTheShufflesAndPairs) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(sm70::c_row(lane, i), sm70::c_row(lane, 0) + (i & 2));
      if (i % 2 == 0) {
        EXPECT_EQ(sm70::c_col(lane, i + 1), sm70::c_col(lane, i) + 1);
        EXPECT_EQ(sm70::c_col(lane, i) % 2, 0);
      }
    }
    for (int other = 0; other < 32; ++other) {
      const bool same_row = sm70::c_row(other, 0) == sm70::c_row(lane, 0);
      const int diff = lane ^ other;
      const bool shuffle_reach = (diff & ~(sm70::kRowShuffle1 | sm70::kRowShuffle2)) == 0;
      EXPECT_EQ(same_row, shuffle_reach) << "lanes " << lane << " and " << other;
    }
  }
  int writers[16] = {};
  for (int lane = 0; lane < 32; ++lane)
    if (sm70::c_col(lane, 0) == 0) {
      ++writers[sm70::c_row(lane, 0)];
      ++writers[sm70::c_row(lane, 2)];
    }
  for (int r = 0; r < 16; ++r) EXPECT_EQ(writers[r], 1) << "row " << r;
}

TEST(CudaSm70Layout, TilesFitSm70AndTileTheBuckets) {
  for (int bucket : flashattn::detail::cuda::attn::kHeadDimBuckets) {
    const sm70::FwdTile t = sm70::fwd_tile(bucket);
    EXPECT_LE(t.smem_bytes(), 96 * 1024) << bucket;
    EXPECT_EQ(bucket % 16, 0) << bucket;             // 16-dim column groups of O
    EXPECT_EQ(t.block_n() % 16, 0) << bucket;        // 16-key column groups of S, k4 steps of P V
    EXPECT_EQ(t.row_pitch() * 2 % 16, 0) << bucket;  // 16-byte rows: vector loads and 8-byte operands
    EXPECT_EQ(t.p_pitch() % 4, 0) << bucket;         // P rows: 8-byte A operands
    const sm70::BwdTile bt = sm70::bwd_tile(bucket);
    EXPECT_LE(bt.kv_smem_bytes(), 96 * 1024) << bucket;
    EXPECT_LE(bt.dq_smem_bytes(), 96 * 1024) << bucket;
    EXPECT_EQ(bt.q_rows() % 16, 0) << bucket;  // 16-query column groups of S^T
    EXPECT_EQ(bt.block_n() % 16, 0) << bucket;
    EXPECT_EQ(bt.kv_stage_pitch() % 4, 0) << bucket;
    EXPECT_EQ(bt.dq_stage_pitch() % 4, 0) << bucket;
    // The LSE and D arrays after the halves of the dK/dV kernel's shared memory are 16-byte aligned.
    EXPECT_EQ((bt.kv_smem_bytes() - 2 * bt.q_rows() * 4) % 16, 0) << bucket;
  }
}

// ---------------------------------------------------------------------------------------------------
// GPU: the backend against the reference

constexpr const char* kBackend = "cuda_sm70";

void expect_forward_matches(const AttnConfig& cfg, uint64_t seed) { expect_forward_matches_on(kBackend, cfg, seed); }
void expect_backward_matches(const AttnConfig& cfg, uint64_t seed) {
  expect_backward_matches_on(kBackend, cfg, seed, false);
}

AttnConfig small_config(int bucket, int64_t sq, int64_t sk, bool causal) {
  return bucket_config(bucket, sq, sk, causal, DType::f16);
}

class CudaSm70Buckets : public testing::TestWithParam<int> {};

// Query and key counts one below, at and one above the tile, causal or not, with and without a softcap.
TEST_P(CudaSm70Buckets, ForwardAtTileBoundaries) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  const int bucket = GetParam();
  const sm70::FwdTile tile = sm70::fwd_tile(bucket);
  uint64_t seed = 100;
  for (int dm : {-1, 0, 1})
    for (int dn : {-1, 0, 1})
      for (bool causal : {false, true}) {
        AttnConfig c = small_config(bucket, sm70::FwdTile::kBlockM + dm, tile.block_n() + dn, causal);
        if (dn == 1) c.softcap = 20.0f;
        expect_forward_matches(c, ++seed);
      }
}

// Key counts around the dK/dV kernel's 64 keys and the dQ kernel's key tile, query counts around the dQ
// kernel's 64 rows and the dK/dV kernel's query step, causal or not; a softcap on some (its derivative).
TEST_P(CudaSm70Buckets, BackwardAtTileBoundaries) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  const int bucket = GetParam();
  const sm70::BwdTile tile = sm70::bwd_tile(bucket);
  uint64_t seed = 200;
  for (int64_t sk : {int64_t(sm70::BwdTile::kRows) - 1, int64_t(sm70::BwdTile::kRows) + 1, int64_t(tile.block_n()) + 1})
    for (int64_t sq : {int64_t(sm70::BwdTile::kRows) + 1, int64_t(tile.q_rows()) - 1})
      for (bool causal : {false, true}) {
        AttnConfig c = small_config(bucket, sq, sk, causal);
        if (sq == tile.q_rows() - 1) c.softcap = 20.0f;
        expect_backward_matches(c, ++seed);
      }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaSm70Buckets, testing::ValuesIn(flashattn::detail::cuda::attn::kHeadDimBuckets),
                         [](const testing::TestParamInfo<int>& info) { return "d" + std::to_string(info.param); });

TEST(CudaSm70, DropoutWindowAlibiGqaMatchReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  uint64_t seed = 40;
  for (int d : {64, 128, 256}) {
    AttnConfig c;
    c.dtype = DType::f16;
    c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 190, c.heads = 4, c.heads_k = 2, c.head_dim = d;
    c.dropout_p = 0.5f;
    c.dropout_seed = 987654321;
    c.dropout_offset = 3;
    expect_forward_matches(c, ++seed);
    expect_backward_matches(c, ++seed);
    c.dropout_p = 0.0f;
    c.window_left = 37, c.window_right = 5;
    c.alibi = true;
    expect_forward_matches(c, ++seed);
    expect_backward_matches(c, ++seed);
  }
}

TEST(CudaSm70, VarlenWithEmptySequencesMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  AttnConfig c;
  c.dtype = DType::f16, c.heads = 4, c.heads_k = 1, c.head_dim = 96;
  c.varlen_q = {70, 0, 1, 129}, c.varlen_k = {65, 3, 0, 200};
  c.causal = true;
  expect_forward_matches(c, 60);
  expect_backward_matches(c, 61);
}

// Paged K/V in the varlen forward (vLLM's prefill call), pages of 16 and 256 rows, and seqused_k.
TEST(CudaSm70, PagedVarlenAndSequsedKMatchReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  uint64_t seed = 65;
  for (int64_t page : {int64_t(16), int64_t(256)})
    for (bool seqused : {false, true}) {
      AttnConfig c;
      c.dtype = DType::f16, c.heads = 8, c.heads_k = 2, c.head_dim = 128;
      c.varlen_q = {1, 300, 17}, c.varlen_k = {400, 300, 33};
      c.causal = true;
      c.page_size = page;
      c.seqused_k = seqused;
      expect_forward_matches(c, ++seed);
    }
}

// Every gradient element is written by one CTA (no atomics): two runs give the same bits.
TEST(CudaSm70, BackwardIsBitwiseRepeatable) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  AttnConfig c;
  c.dtype = DType::f16, c.batch = 2, c.seqlen_q = 200, c.seqlen_k = 300, c.heads = 8, c.heads_k = 2;
  c.head_dim = 128;
  c.causal = true;
  const AttnInputs in = make_inputs(c, 70);
  BwdOutputs first, second;
  FA_SKIP_IF_UNSUPPORTED(
      first = run_backward(in, run_forward(in, kBackend, Device::cuda(0)), kBackend, Device::cuda(0), false));
  second = run_backward(in, run_forward(in, kBackend, Device::cuda(0)), kBackend, Device::cuda(0), false);
  EXPECT_EQ(std::memcmp(first.dq.data(), second.dq.data(), first.dq.nbytes()), 0);
  EXPECT_EQ(std::memcmp(first.dk.data(), second.dk.data(), first.dk.nbytes()), 0);
  EXPECT_EQ(std::memcmp(first.dv.data(), second.dv.data(), first.dv.nbytes()), 0);
}

// flash_attn_with_kvcache: paged and contiguous caches, new tokens with rotary, cache_batch_idx, leftpad,
// causal and window, GQA; `image`: through the embedded image's PTX. The shared KV-cache catalogue
// (test_backend_kvcache.cpp) covers more shapes on the compiled kernels.
void expect_kvcache_cases_match(bool image) {
  uint64_t seed = image ? 900 : 800;
  for (int64_t page_size : {int64_t(0), int64_t(16)})
    for (int64_t head_dim : {int64_t(64), int64_t(128), int64_t(200)}) {
      KVConfig c;
      c.dtype = DType::f16, c.batch = 3, c.heads = 8, c.heads_k = 2, c.head_dim = head_dim;
      c.seqlen_q = 2, c.seqlen_new = 2, c.capacity = 160, c.page_size = page_size;
      c.cache_seqlens = {150, 3, 77};
      c.rotary_dim = 32, c.rotary_interleaved = head_dim == 64;
      c.causal = true;
      c.batch_idx = page_size == 0;
      c.leftpad = page_size == 0 && head_dim == 128;
      if (head_dim == 200) c.window_left = 40, c.window_right = 0;
      SCOPED_TRACE(c.name());
      const KVInputs in = make_kv_inputs(c, ++seed);
      const KVOracle oracle = kv_oracle(in);
      KVOutputs got;
      FA_SKIP_IF_UNSUPPORTED(got = run_kvcache(in, kBackend, Device::cuda(0)));
      EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, c.dtype));
      EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
    }
}

TEST(CudaSm70, KVCacheMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  expect_kvcache_cases_match(false);
}

// Calls like the above once more through the embedded image's PTX (loaded with the runtime's library API and
// compiled by the driver), the path a Volta GPU takes with its cubin.
TEST(CudaSm70, EmbeddedImageMatchesReference) {
  FA_SKIP_WITHOUT_GPU("cuda_sm70");
  ASSERT_EQ(setenv("FLASHATTN_SM70_IMAGE", "1", 1), 0);
  uint64_t seed = 80;
  for (int bucket : {64, 128, 256})
    for (bool causal : {false, true}) expect_forward_matches(small_config(bucket, 100, 130, causal), ++seed);
  AttnConfig c;
  c.dtype = DType::f16, c.batch = 2, c.seqlen_q = 90, c.seqlen_k = 120, c.heads = 4, c.heads_k = 4, c.head_dim = 64;
  c.dropout_p = 0.25f, c.dropout_seed = 5, c.dropout_offset = 7;
  expect_forward_matches(c, ++seed);
  expect_backward_matches(c, ++seed);
  for (int bucket : {64, 160}) expect_backward_matches(small_config(bucket, 70, 90, true), ++seed);
  // A head dim the dispatcher pads (to 64): its copies run through the image too (api/head_dim_pad_cuda.cu).
  AttnConfig odd = small_config(64, 70, 90, true);
  odd.head_dim = 59;
  expect_forward_matches(odd, ++seed);
  expect_backward_matches(odd, ++seed);
  expect_kvcache_cases_match(true);
  ASSERT_EQ(unsetenv("FLASHATTN_SM70_IMAGE"), 0);
}

}  // namespace
}  // namespace fa_test
