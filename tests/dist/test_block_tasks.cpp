// The ring's call planner against brute force: for every (rank, visiting rank) pair, the planned calls,
// read with flash-attn's own mask semantics (common/score.h), must cover each globally visible
// (query, key) pair exactly once and nothing else.

#include <gtest/gtest.h>

#include <vector>

#include "common/score.h"
#include "dist/block_tasks.h"
#include "dist/shard_map.h"
#include "flashattn/error.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;
using dist::detail::GlobalWindow;

struct PlanCase {
  int64_t seqlen;
  int world;
  dist::ShardLayout layout;
  GlobalWindow window;
};

// Global position of local row `row` of a rank's shard of one sequence.
int64_t global_position(const dist::detail::SeqShard& s, int64_t row) {
  for (const dist::Segment& seg : s.segments)
    if (row >= s.row_base + seg.local_row && row < s.row_base + seg.local_row + seg.length)
      return seg.start + (row - s.row_base - seg.local_row);
  ADD_FAILURE() << "row " << row << " is in no segment";
  return -1;
}

bool visible(int64_t qpos, int64_t kpos, GlobalWindow w) {
  return (w.left < 0 || kpos >= qpos - w.left) && (w.right < 0 || kpos <= qpos + w.right);
}

void check_plan(const PlanCase& pc) {
  dist::ShardSpec spec;
  spec.layout = pc.layout;
  spec.seqlen = pc.seqlen;
  const int64_t S = pc.seqlen;
  std::vector<int> covered(size_t(S * S), 0);
  for (int r = 0; r < pc.world; ++r) {
    const auto mine = dist::detail::rank_shard(spec, pc.world, r);
    for (int src = 0; src < pc.world; ++src) {
      const auto theirs = dist::detail::rank_shard(spec, pc.world, src);
      for (const auto& t : dist::detail::plan_block_tasks(mine, theirs, pc.window)) {
        const flashattn::detail::Mask m{t.q_rows, t.k_rows, t.window_left, t.window_right};
        bool row_sees_something = true;
        for (int64_t i = 0; i < t.q_rows; ++i) {
          row_sees_something = row_sees_something && m.key_begin(i) < m.key_end(i);
          for (int64_t j = m.key_begin(i); j < m.key_end(i); ++j) {
            const int64_t qp = global_position(mine.seqs[0], t.q_row + i);
            const int64_t kp = global_position(theirs.seqs[0], t.k_row + j);
            ASSERT_TRUE(visible(qp, kp, pc.window))
                << "rank " << r << " src " << src << ": query " << qp << " must not see key " << kp;
            ++covered[size_t(qp * S + kp)];
          }
        }
        EXPECT_TRUE(row_sees_something) << "a planned call has a query row that sees no key";
      }
    }
  }
  for (int64_t qp = 0; qp < S; ++qp)
    for (int64_t kp = 0; kp < S; ++kp)
      ASSERT_EQ(covered[size_t(qp * S + kp)], visible(qp, kp, pc.window) ? 1 : 0)
          << "query " << qp << ", key " << kp << " (S " << S << ", world " << pc.world << ", "
          << dist::layout_name(pc.layout) << ", window " << pc.window.left << "/" << pc.window.right << ")";
}

TEST(RingPlan, CoversExactlyTheVisiblePairs) {
  const std::vector<GlobalWindow> windows = {{-1, -1}, {-1, 0}, {3, 0}, {0, 0}, {5, 2}, {-1, 4}, {2, -1}, {0, 9}};
  for (int world : {1, 2, 3, 4, 5})
    for (int64_t seqlen : {1, 3, 8, 13, 31, 40})
      for (dist::ShardLayout layout : {dist::ShardLayout::contiguous, dist::ShardLayout::zigzag})
        for (GlobalWindow w : windows) {
          check_plan({seqlen, world, layout, w});
          if (HasFatalFailure()) return;  // one counterexample is enough
        }
}

// Zigzag's point: under a causal mask every rank attends to the same number of (query, key) pairs
// (exactly, when the sequence divides into 2 * world equal chunks).
TEST(RingPlan, ZigzagBalancesCausalWork) {
  for (int world : {2, 3, 4, 8}) {
    dist::ShardSpec spec;
    spec.layout = dist::ShardLayout::zigzag;
    spec.seqlen = 2 * world * 16;
    int64_t first = -1;
    for (int r = 0; r < world; ++r) {
      int64_t pairs = 0;
      for (int src = 0; src < world; ++src)
        for (const auto& t : dist::detail::plan_block_tasks(dist::detail::rank_shard(spec, world, r),
                                                            dist::detail::rank_shard(spec, world, src), {-1, 0})) {
          const flashattn::detail::Mask m{t.q_rows, t.k_rows, t.window_left, t.window_right};
          for (int64_t i = 0; i < t.q_rows; ++i) pairs += m.key_end(i) - m.key_begin(i);
        }
      if (first < 0) first = pairs;
      EXPECT_EQ(pairs, first) << "rank " << r << " of " << world;
    }
  }
}

// Unmasked blocks become one call per step (not one per pair of zigzag chunks).
TEST(RingPlan, CoalescesUnmaskedCalls) {
  dist::ShardSpec spec;
  spec.layout = dist::ShardLayout::zigzag;
  spec.seqlen = 64;
  const auto r1 = dist::detail::rank_shard(spec, 4, 1);
  EXPECT_EQ(dist::detail::plan_block_tasks(r1, dist::detail::rank_shard(spec, 4, 3), {-1, -1}).size(), 1u);
  // Causal, a visiting rank below: both local chunks against its first chunk, one call.
  const auto past = dist::detail::plan_block_tasks(r1, dist::detail::rank_shard(spec, 4, 0), {-1, 0});
  ASSERT_EQ(past.size(), 1u);
  EXPECT_EQ(past[0].q_rows, 16);
  EXPECT_EQ(past[0].k_rows, 8);
  EXPECT_TRUE(past[0].full());
}

TEST(RingShard, ZigzagSegments) {
  const auto segs = dist::shard_segments(16, 4, 1, dist::ShardLayout::zigzag);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].start, 2);  // chunk 1 of 8
  EXPECT_EQ(segs[0].length, 2);
  EXPECT_EQ(segs[1].start, 12);  // chunk 6 = 2 * 4 - 1 - 1
  EXPECT_EQ(segs[1].local_row, 2);
  // Uneven: 10 positions in 4 contiguous chunks are 3, 3, 2, 2.
  EXPECT_EQ(dist::shard_length(10, 4, 0, dist::ShardLayout::contiguous), 3);
  EXPECT_EQ(dist::shard_length(10, 4, 3, dist::ShardLayout::contiguous), 2);
  EXPECT_EQ(dist::shard_length(2, 4, 3, dist::ShardLayout::contiguous), 0);
  EXPECT_THROW(dist::shard_segments(8, 4, 4, dist::ShardLayout::zigzag), flashattn::Error);
}

}  // namespace
}  // namespace fa_test
