// Ring attention on CUDA tensors over MPI (run under mpiexec with 2 ranks sharing one GPU):
// MpiCommunicator's host-staged path carries the K/V blocks and dK/dV accumulators between ranks, the
// merges and accumulations run on the GPU, and the gathered result of every dist case on every CUDA
// backend must meet flash-attn's criterion against the single-process fp64 oracle (on rank 0). Skips
// when no GPU is visible.

#include <gtest/gtest.h>

#include "flashattn/dist_mpi.h"
#include "ring_cases.h"
#include "test_stream.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;

// The ring's transport (CUDA buffers, staged through pinned host memory) and the host communicator
// that gathers the outputs for the comparison: the same ranks.
dist::MpiCommunicator& cuda_world() {
  static dist::MpiCommunicator comm(MPI_COMM_WORLD, flashattn::Device::cuda(0));
  return comm;
}
dist::MpiCommunicator& host_world() {
  static dist::MpiCommunicator comm(MPI_COMM_WORLD);
  return comm;
}

class RingMpiCuda : public testing::TestWithParam<DistParam> {};

TEST_P(RingMpiCuda, MatchesSingleProcess) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  const TestStream stream;
  expect_case(DistRun{cuda_world(), &host_world(), stream.get()}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, RingMpiCuda, testing::ValuesIn(dist_params(flashattn::DeviceType::cuda)),
                         dist_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RingMpiCuda);

// A bad argument on one rank only must make every rank throw before any block moves, also when the
// ranks agree through device buffers.
TEST(RingMpiCudaErrors, OneRankWrongShapeFailsEveryRank) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  expect_one_rank_mistake_fails_every_rank(cuda_world());
}

}  // namespace
}  // namespace fa_test
