// Context-parallel attention over MPI (run under mpiexec with 2, 3 and 4 ranks): ring forward and
// backward and the all-gather mode, for both layouts, against the single-process fp64 oracle with
// flash-attn's criterion. Comparisons happen on rank 0; every rank takes part in every call.

#include <gtest/gtest.h>

#include "flashattn/dist_mpi.h"
#include "ring_cases.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;

dist::MpiCommunicator& world() {
  static dist::MpiCommunicator comm(MPI_COMM_WORLD);
  return comm;
}

const std::vector<DistCase>& cases() {
  static const std::vector<DistCase> c = dist_cases();
  return c;
}

class RingMpi : public testing::TestWithParam<DistParam> {};

TEST_P(RingMpi, MatchesSingleProcess) {
  const auto& [backend, index] = GetParam();
  try {
    EXPECT_TRUE(check_distributed(world(), cases()[size_t(index)], backend, 7000 + uint64_t(index)))
        << "ranks: " << world().size();
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RingMpi, testing::ValuesIn(dist_params()), dist_param_name);

// Says visibly when no backend can test the ring's backward.
TEST(RingMpiBackward, HasABackend) {
  if (dist_backends(true).empty())
    GTEST_SKIP() << "no CPU backend whose backward reads the given softmax_lse: ring backward cases not run";
}

// A bad argument on one rank only (here: the wrong number of rows on the last rank) must make every rank
// throw before any transfer, instead of leaving the others waiting for a block that never comes.
TEST(RingMpiErrors, OneRankWrongShapeFailsEveryRank) {
  const int world_size = world().size(), rank = world().rank();
  dist::ShardSpec spec;
  spec.layout = dist::ShardLayout::contiguous;
  spec.seqlen = 8 * world_size;
  const int64_t rows = 8 + (rank == world_size - 1 ? 1 : 0);
  HostTensor q(DType::f32, {1, rows, 1, 8}), out(DType::f32, {1, rows, 1, 8});
  std::mt19937_64 rng(1);
  q.fill_normal(rng);
  flashattn::FwdParams p;
  p.q = p.k = p.v = q.view();
  p.out = out.view();
  p.options.causal = true;
  try {
    dist::ring_forward(world(), p, spec);
    ADD_FAILURE() << "ring_forward accepted a shard of the wrong length";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
    const std::string msg = e.what();
    if (rank == world_size - 1) {
      EXPECT_NE(msg.find("q: expected 8 rows"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("rank " + std::to_string(world_size - 1) + " rejected the call"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace fa_test
