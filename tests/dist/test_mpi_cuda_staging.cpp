// MpiCommunicator's host-staged path for CUDA buffers (builds with CUDA; run under mpiexec): a ring shift
// and an allgather of device memory must deliver the same bytes as the host path. Skips without a GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "flashattn/dist_mpi.h"

namespace {

namespace dist = flashattn::dist;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Bytes that identify their sender and position.
std::vector<uint8_t> pattern(int rank, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t(rank * 37 + i * 11);
  return v;
}

class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) { EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess); }
  ~DeviceBytes() { cudaFree(ptr_); }
  void* get() const { return ptr_; }
  void upload(const std::vector<uint8_t>& v) {
    ASSERT_EQ(cudaMemcpy(ptr_, v.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> v(bytes_);
    EXPECT_EQ(cudaMemcpy(v.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

TEST(MpiCudaStaging, RingShiftDeliversThePreviousRanksBytes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  dist::MpiCommunicator comm(MPI_COMM_WORLD, flashattn::Device::cuda(0));
  const size_t bytes = (size_t(1) << 20) + 3;  // not a multiple of anything convenient
  DeviceBytes send(bytes), recv(bytes);
  send.upload(pattern(comm.rank(), bytes));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int round = 0; round < 3; ++round) comm.start_ring_shift(send.get(), recv.get(), bytes, stream)->wait(stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  const int prev = (comm.rank() - 1 + comm.size()) % comm.size();
  EXPECT_EQ(recv.download(), pattern(prev, bytes));
}

TEST(MpiCudaStaging, AllgatherCollectsEveryRank) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  dist::MpiCommunicator comm(MPI_COMM_WORLD, flashattn::Device::cuda(0));
  const size_t bytes = 4099;
  DeviceBytes send(bytes), recv(bytes * size_t(comm.size()));
  send.upload(pattern(comm.rank(), bytes));
  comm.allgather(send.get(), recv.get(), bytes, nullptr);
  const std::vector<uint8_t> all = recv.download();
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(std::vector<uint8_t>(all.begin() + long(size_t(r) * bytes), all.begin() + long(size_t(r + 1) * bytes)),
              pattern(r, bytes))
        << "rank " << r << "'s part";
}

}  // namespace
