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

class RingMpi : public testing::TestWithParam<DistParam> {};

TEST_P(RingMpi, MatchesSingleProcess) { expect_case(DistRun{world()}, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, RingMpi, testing::ValuesIn(dist_params()), dist_param_name);

// Says visibly when no backend can test the ring's backward.
TEST(RingMpiBackward, HasABackend) {
  if (dist_backends(true).empty())
    GTEST_SKIP() << "no CPU backend whose backward reads the given softmax_lse: ring backward cases not run";
}

// A bad argument on one rank only (here: the wrong number of rows on the last rank) must make every rank
// throw before any transfer, instead of leaving the others waiting for a block that never comes.
TEST(RingMpiErrors, OneRankWrongShapeFailsEveryRank) { expect_one_rank_mistake_fails_every_rank(world()); }

}  // namespace
}  // namespace fa_test
