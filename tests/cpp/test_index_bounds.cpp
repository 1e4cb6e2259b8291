// The clamps of common/index_bounds.h that keep unchecked index values inside the call's buffers on the
// GPU: every result addresses what the buffers can hold, and valid values pass unchanged. Exhaustive over
// small ranges (which cover every branch) plus the edge values of int32 and int64.

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "api/problem.h"
#include "common/index_bounds.h"
#include "common/kvcache.h"
#include "common/score.h"

namespace flashattn::detail {
namespace {

const std::vector<int64_t> kEdges = {
    INT64_MIN,     INT64_MIN + 1, INT32_MIN,        -INT64_C(1) << 31, -2,       -1, 0, 1, 2, 3,
    INT32_MAX - 1, INT32_MAX,     INT64_C(1) << 31, INT64_MAX - 1,     INT64_MAX};

std::vector<int64_t> values() {
  std::vector<int64_t> v = kEdges;
  for (int64_t x = -8; x <= 24; ++x) v.push_back(x);
  return v;
}

TEST(IndexBounds, ClampLengthStaysInRangeAndKeepsValidValues) {
  for (int64_t hi : values()) {
    for (int64_t v : values()) {
      const int64_t r = clamp_length(v, hi);
      const int64_t top = hi < 0 ? 0 : hi;
      ASSERT_GE(r, 0) << v << " " << hi;
      ASSERT_LE(r, top) << v << " " << hi;
      if (v >= 0 && v <= hi) {
        ASSERT_EQ(r, v);
      }
      if (v < 0) {
        ASSERT_EQ(r, 0);
      }
      if (v > top) {
        ASSERT_EQ(r, top);
      }
    }
  }
}

TEST(IndexBounds, ClampIndexStaysInRangeAndKeepsValidValues) {
  for (int64_t n : values()) {
    for (int64_t v : values()) {
      const int64_t r = clamp_index(v, n);
      if (n <= 0) {
        ASSERT_EQ(r, 0) << v << " " << n;
        continue;
      }
      ASSERT_GE(r, 0) << v << " " << n;
      ASSERT_LT(r, n) << v << " " << n;
      if (v >= 0 && v < n) {
        ASSERT_EQ(r, v);
      }
    }
  }
}

TEST(IndexBounds, ClampPageAddressesThePool) {
  const std::vector<int64_t> pools = {0, 1, 2, 3, 17, INT32_MAX - 1, INT32_MAX, INT64_C(1) << 31, INT64_C(1) << 40};
  for (int64_t pages : pools) {
    const int32_t last = last_page_of(pages);
    ASSERT_EQ(int64_t(last), pages == 0 ? 0 : (pages - 1 > INT32_MAX ? INT32_MAX : pages - 1)) << pages;
    for (int64_t e64 : values()) {
      if (e64 < INT32_MIN || e64 > INT32_MAX) continue;  // block_table holds int32
      const int32_t e = int32_t(e64);
      const int32_t r = clamp_page(e, last);
      ASSERT_GE(r, 0) << e << " " << pages;
      ASSERT_LE(r, last) << e << " " << pages;
      if (pages > 0) {
        ASSERT_LT(int64_t(r), pages);
      }
      if (e >= 0 && int64_t(e) < pages) {  // every valid entry passes unchanged
        ASSERT_EQ(r, e) << pages;
      }
    }
  }
}

// Every pair of offsets, monotone or not, inside or outside the packed tensor: the span lies inside
// [0, total) and is at most max_len long; valid offsets give the exact sequence.
TEST(IndexBounds, PackedSpanStaysInsideThePackedTensor) {
  for (int64_t total : {0, 1, 5, 16}) {
    for (int64_t max_len : {0, 1, 3, 16, 100}) {
      for (int64_t begin : values()) {
        for (int64_t end : values()) {
          const PackedSpan s = packed_span(begin, end, total, max_len);
          ASSERT_GE(s.start, 0);
          ASSERT_GE(s.len, 0);
          ASSERT_LE(s.start + s.len, total) << begin << " " << end << " " << total;
          ASSERT_LE(s.len, max_len);
          if (end < begin) {
            ASSERT_EQ(s.len, 0) << "non-monotone offsets give an empty sequence";
          }
          if (0 <= begin && begin <= end && end <= total && end - begin <= max_len) {
            ASSERT_EQ(s.start, begin);
            ASSERT_EQ(s.len, end - begin);
          }
        }
      }
    }
  }
}

// Positions read: [leftpad, seqlen_before + seqlen_new) for attention, [seqlen_before, + seqlen_new)
// for the append: both inside [0, capacity) whatever the values.
TEST(IndexBounds, CacheExtentStaysInsideTheCache) {
  for (int64_t capacity : {0, 1, 4, 33}) {
    for (int64_t seqlen_new = 0; seqlen_new <= capacity; ++seqlen_new) {
      for (int64_t before : values()) {
        for (int64_t pad : values()) {
          const CacheExtent e = cache_extent(before, pad, seqlen_new, capacity);
          ASSERT_GE(e.leftpad, 0);
          ASSERT_GE(e.seqlen_before, 0);
          ASSERT_GE(e.seqlen_k, 0);
          ASSERT_LE(e.seqlen_before + seqlen_new, capacity) << before;
          ASSERT_LE(e.leftpad + e.seqlen_k, capacity) << before << " " << pad;
          if (e.seqlen_k > 0) {
            ASSERT_EQ(e.leftpad + e.seqlen_k, e.seqlen_before + seqlen_new);
          }
          if (0 <= pad && pad <= before && before <= capacity - seqlen_new) {
            ASSERT_EQ(e.seqlen_before, before);
            ASSERT_EQ(e.leftpad, pad);
            ASSERT_EQ(e.seqlen_k, before + seqlen_new - pad);
          }
        }
      }
    }
  }
}

// The shared addressing functions apply the clamps: seq_range (every varlen kernel) and cache_seq,
// cache_offset, rotary_q_position (every kvcache kernel).
TEST(IndexBounds, SeqRangeClampsBadOffsets) {
  std::vector<int32_t> cu_q = {0, 7, 3, INT32_MAX, -5, INT32_MIN};
  std::vector<int32_t> cu_k = {0, 100, 20, 21, 40, 50};
  FwdProblem p;
  p.batch = 5;
  p.cu_seqlens_q = cu_q.data();
  p.cu_seqlens_k = cu_k.data();
  p.total_q = 10;
  p.total_k = 40;
  p.seqlen_q = 8;
  p.seqlen_k = 30;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SeqRange r = seq_range(p, b);
    EXPECT_LE(r.q_start + r.sq, p.total_q) << b;
    EXPECT_LE(r.k_start + r.sk, p.total_k) << b;
    EXPECT_LE(r.sq, p.seqlen_q) << b;
    EXPECT_LE(r.sk, p.seqlen_k) << b;
  }
  EXPECT_EQ(seq_range(p, 0).sq, 7);   // valid
  EXPECT_EQ(seq_range(p, 0).sk, 30);  // past max_seqlen_k: cut to it
  EXPECT_EQ(seq_range(p, 1).sq, 0);   // 7 -> 3: empty
  EXPECT_EQ(seq_range(p, 2).sq, 7);   // 3 -> INT_MAX: to the end of q
  EXPECT_EQ(seq_range(p, 3).q_start, 10);
}

TEST(IndexBounds, CacheSeqAndOffsetsClampBadValues) {
  std::vector<int32_t> seqlens = {INT32_MAX, -3, 5, 64};
  std::vector<int32_t> leftpad = {2, INT32_MIN, 60, INT32_MAX};
  std::vector<int32_t> table = {0, 1, 2, INT32_MAX, -1, 3, 9, INT32_MIN, 5, 6, 7, 8, 1, 1, 1, 1};
  KVCacheProblem p;
  p.batch = 4;
  p.seqlen_new = 3;
  p.cache_seqlens = seqlens.data();
  p.cache_leftpad = leftpad.data();
  p.cache.block_table = table.data();
  p.cache.block_table_stride = 4;
  p.cache.page_size = 16;
  p.cache.capacity = 64;
  p.cache.num_blocks = 9;
  p.cache.k_batch_stride = p.cache.v_batch_stride = 16 * 2 * 8;
  p.cache.k_row_stride = p.cache.v_row_stride = 2 * 8;
  p.cache.k_head_stride = p.cache.v_head_stride = 8;
  p.rotary.seqlen = 64;
  const int64_t pool = p.cache.num_blocks * p.cache.k_batch_stride;
  for (int64_t b = 0; b < p.batch; ++b) {
    const CacheSeq s = cache_seq(p, b);
    EXPECT_LE(s.seqlen_before + p.seqlen_new, p.cache.capacity) << b;
    EXPECT_LE(s.leftpad + s.seqlen_k, p.cache.capacity) << b;
    EXPECT_LT(rotary_q_position(p, s, 100), p.rotary.seqlen) << b;
    for (int64_t pos = 0; pos < p.cache.capacity; ++pos)
      for (bool v : {false, true}) {
        const int64_t off = cache_offset(p.cache, s, b, pos, 1, v);
        EXPECT_GE(off, 0);
        EXPECT_LT(off + 8, pool + 1);
      }
  }
  EXPECT_EQ(cache_seq(p, 2).seqlen_before, 5);  // valid value unchanged
  EXPECT_EQ(cache_seq(p, 0).seqlen_before, 61);

  // Contiguous cache: cache_batch_idx picks a row of the cache's batch.
  std::vector<int32_t> idx = {-1, 2, INT32_MAX, 1};
  KVCacheProblem c = p;
  c.cache.block_table = nullptr;
  c.cache.page_size = 0;
  c.cache.batches = 2;
  c.cache_batch_idx = idx.data();
  EXPECT_EQ(cache_seq(c, 0).cache_row, 0);
  EXPECT_EQ(cache_seq(c, 1).cache_row, 1);
  EXPECT_EQ(cache_seq(c, 2).cache_row, 1);
  EXPECT_EQ(cache_seq(c, 3).cache_row, 1);
}

}  // namespace
}  // namespace flashattn::detail
