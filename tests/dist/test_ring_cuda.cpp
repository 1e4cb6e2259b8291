// Ring attention on a GPU with the ring of one (LocalCommunicator on cuda:0): every dist case on every
// CUDA backend against the fp64 oracle with flash-attn's criterion, a forward bit-identical to the plain
// call where the ring makes that one call, and the communicator's device copies. Skips when no GPU is
// visible.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <optional>

#include "flashattn/api.h"
#include "flashattn/dist.h"
#include "ring_cases.h"
#include "test_stream.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;

class RingOfOneCuda : public testing::TestWithParam<DistParam> {};

TEST_P(RingOfOneCuda, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  dist::LocalCommunicator comm(flashattn::Device::cuda(0)), host;
  const TestStream stream;
  expect_case(DistRun{comm, &host, stream.get()}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, RingOfOneCuda, testing::ValuesIn(dist_params(flashattn::DeviceType::cuda)),
                         dist_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RingOfOneCuda);

// With one rank and the contiguous layout the ring makes exactly the plain call (the backend dispatch
// chooses), and merging a single partial is exact: out and lse are bit-identical. (The backward's dQ may
// be summed with atomics, so it is checked with the criterion by MatchesReference instead.)
TEST(RingOfOneCudaExact, ContiguousForwardIsThePlainCall) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  AttnConfig cfg;
  cfg.dtype = DType::bf16;
  cfg.batch = 2;
  cfg.seqlen_q = cfg.seqlen_k = 200;
  cfg.heads = 4;
  cfg.heads_k = 2;
  cfg.head_dim = 64;
  cfg.causal = true;
  const AttnInputs in = make_inputs(cfg, 5);
  dist::LocalCommunicator comm(flashattn::Device::cuda(0)), host;
  const TestStream stream;
  const DistCase c{cfg, dist::ShardLayout::contiguous, DistMode::ring, false};
  const DistOutputs ring = run_distributed(DistRun{comm, &host, stream.get()}, c, in, "");
  const FwdOutputs plain = run_forward(in, "", flashattn::Device::cuda(0));
  EXPECT_TRUE(bitwise_equal(ring.fwd.out, plain.out));
  EXPECT_TRUE(bitwise_equal(ring.fwd.lse, plain.lse));
}

TEST(LocalCommunicatorCuda, ShiftAndAllgatherCopyOnTheDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  dist::LocalCommunicator comm(flashattn::Device::cuda(0));
  EXPECT_EQ(comm.device(), flashattn::Device::cuda(0));
  const TestStream stream;
  HostTensor pattern(DType::f32, {1000});
  std::mt19937_64 rng(2);
  pattern.fill_normal(rng);
  HostTensor zeros(DType::f32, {1000});
  const DeviceTensor send(pattern, flashattn::Device::cuda(0)), recv(zeros, flashattn::Device::cuda(0)),
      all(zeros, flashattn::Device::cuda(0));
  comm.start_ring_shift(send.view().data, recv.view().data, pattern.nbytes(), stream.get())->wait(stream.get());
  comm.allgather(send.view().data, all.view().data, pattern.nbytes(), stream.get());
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_TRUE(bitwise_equal(recv.download(), pattern));
  EXPECT_TRUE(bitwise_equal(all.download(), pattern));
}

}  // namespace
}  // namespace fa_test
