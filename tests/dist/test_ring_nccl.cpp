// NcclCommunicator with a world of one (its own ncclUniqueId): the transport's shift, all-gather and
// barrier to itself, wrapping an existing communicator, argument errors, and ring attention (forward,
// backward and the all-gather mode) over it on every dist case against the fp64 oracle. Skips without a
// GPU, except for the argument errors, which need none.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "flashattn/dist_nccl.h"
#include "ring_cases.h"
#include "test_stream.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;

ncclUniqueId fresh_id() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

// One communicator for all tests: creating one costs far more than a small case. It is destroyed when
// the tests end, not at exit, where it would race the CUDA runtime's own teardown.
class WorldOfOne : public testing::Environment {
 public:
  static dist::NcclCommunicator& get() {
    if (!comm_) comm_ = std::make_unique<dist::NcclCommunicator>(0, 1, fresh_id(), flashattn::Device::cuda(0));
    return *comm_;
  }
  void TearDown() override { comm_.reset(); }

 private:
  static inline std::unique_ptr<dist::NcclCommunicator> comm_;
};
[[maybe_unused]] testing::Environment* const world_of_one_environment =
    testing::AddGlobalTestEnvironment(new WorldOfOne);

dist::NcclCommunicator& world_of_one() { return WorldOfOne::get(); }

class RingNccl : public testing::TestWithParam<DistParam> {};

TEST_P(RingNccl, MatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  dist::LocalCommunicator host;
  const TestStream stream;
  expect_case(DistRun{world_of_one(), &host, stream.get()}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, RingNccl, testing::ValuesIn(dist_params(flashattn::DeviceType::cuda)), dist_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RingNccl);

TEST(NcclCommunicator, WorldOfOneShiftsAndGathersToItself) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  dist::NcclCommunicator& comm = world_of_one();
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.device(), flashattn::Device::cuda(0));
  const TestStream stream;
  HostTensor pattern(DType::f32, {(1 << 18) + 3});
  std::mt19937_64 rng(4);
  pattern.fill_normal(rng);
  HostTensor zeros(DType::f32, pattern.shape());
  const DeviceTensor send(pattern, comm.device()), recv(zeros, comm.device()), all(zeros, comm.device());
  // Twice through one Pending each, the second not waited for explicitly (its destructor completes it).
  comm.start_ring_shift(send.view().data, recv.view().data, pattern.nbytes(), stream.get())->wait(stream.get());
  { auto unwaited = comm.start_ring_shift(send.view().data, recv.view().data, pattern.nbytes(), stream.get()); }
  comm.allgather(send.view().data, all.view().data, pattern.nbytes(), stream.get());
  comm.barrier();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_TRUE(bitwise_equal(recv.download(), pattern));
  EXPECT_TRUE(bitwise_equal(all.download(), pattern));
}

TEST(NcclCommunicator, WrapsAnExistingCommunicator) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclComm_t raw = nullptr;
  ASSERT_EQ(ncclCommInitRank(&raw, 1, fresh_id(), 0), ncclSuccess);
  {
    dist::NcclCommunicator comm(raw);
    EXPECT_EQ(comm.comm(), raw);
    EXPECT_EQ(comm.rank(), 0);
    EXPECT_EQ(comm.size(), 1);
    EXPECT_EQ(comm.device(), flashattn::Device::cuda(0));
    comm.barrier();
  }
  EXPECT_EQ(ncclCommDestroy(raw), ncclSuccess);  // still ours: the wrapper did not destroy it
}

void expect_argument_error(const std::function<void()>& make, const std::string& arg) {
  try {
    make();
    ADD_FAILURE() << "accepted a bad " << arg;
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(arg + ": expected"), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicator, ArgumentErrorsNameTheArgument) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);  // never used: every call below fails its checks first
  expect_argument_error([&] { dist::NcclCommunicator(1, 1, id, flashattn::Device::cuda(0)); }, "rank");
  expect_argument_error([&] { dist::NcclCommunicator(0, 0, id, flashattn::Device::cuda(0)); }, "size");
  expect_argument_error([&] { dist::NcclCommunicator(0, 1, id, flashattn::Device::cpu()); }, "device");
  expect_argument_error([&] { dist::NcclCommunicator(0, 1, id, flashattn::Device::cuda(1000)); }, "device");
  expect_argument_error([&] { dist::NcclCommunicator(nullptr); }, "comm");
}

}  // namespace
}  // namespace fa_test
