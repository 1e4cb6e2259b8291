// NcclCommunicator: ring shifts and all-gathers as NCCL calls on an internal stream, ordered against the
// caller's stream with events (include/flashattn/dist_nccl.h says why).

#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "flashattn/dist_nccl.h"
#include "flashattn/error.h"

namespace flashattn::dist {

namespace {

using flashattn::detail::cuda::DeviceGuard;

void check_nccl(ncclResult_t rc, const char* what, ncclComm_t comm) {
  if (rc == ncclSuccess) return;
  std::string detail = ncclGetErrorString(rc);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  if (last && *last) detail += " (" + std::string(last) + ")";
  throw Error(Status::device_error, std::string("flashattn::dist::NcclCommunicator: ") + what + " failed: " + detail);
}

[[noreturn]] void bad_argument(const std::string& arg, const std::string& expected, const std::string& got) {
  throw Error(Status::invalid_argument,
              "flashattn::dist::NcclCommunicator: " + arg + ": expected " + expected + ", got " + got);
}

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream); }

// A transfer queued on the internal stream; `done` is recorded after it there.
class NcclPending final : public Communicator::Pending {
 public:
  NcclPending(Device device, cudaEvent_t done) : device_(device), done_(done) {}
  ~NcclPending() override {
    if (!done_) return;
    // Not waited for: block until the transfer completes, so its buffers may be released (dist.h).
    if (!waited_) cudaEventSynchronize(done_);
    cudaEventDestroy(done_);
  }
  void wait(Stream stream) override {
    if (!done_) return;
    DeviceGuard guard(device_);
    FA_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), done_, 0));
    waited_ = true;
  }

 private:
  Device device_;
  cudaEvent_t done_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm) : comm_(comm) {
  if (!comm) bad_argument("comm", "an initialised ncclComm_t", "null");
  int device = 0;
  check_nccl(ncclCommCuDevice(comm_, &device), "ncclCommCuDevice", comm_);
  check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
  check_nccl(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
  device_ = Device::cuda(device);
  create_resources();
}

NcclCommunicator::NcclCommunicator(int rank, int size, const ncclUniqueId& id, Device device)
    : owned_(true), device_(device), rank_(rank), size_(size) {
  if (size < 1) bad_argument("size", "at least 1 rank", std::to_string(size));
  if (rank < 0 || rank >= size)
    bad_argument("rank", "a rank in [0, " + std::to_string(size) + ")", std::to_string(rank));
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    cudaGetLastError();
    visible = 0;
  }
  if (device.type != DeviceType::cuda || device.index < 0 || device.index >= visible)
    bad_argument("device", "a visible CUDA device (" + std::to_string(visible) + " visible)", device_name(device));
  DeviceGuard guard(device_);
  check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank", nullptr);
  try {
    create_resources();
  } catch (...) {
    ncclCommDestroy(comm_);
    throw;
  }
}

void NcclCommunicator::create_resources() {
  DeviceGuard guard(device_);
  int least = 0, greatest = 0;
  FA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  FA_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  FA_CUDA_CHECK(cudaEventCreateWithFlags(&caller_ready_, cudaEventDisableTiming));
  FA_CUDA_CHECK(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming));
  FA_CUDA_CHECK(cudaMalloc(&barrier_value_, sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  // Destructors must not throw: failures here are ignored (the process is usually ending).
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_.index);
  if (stream_) cudaStreamSynchronize(stream_);
  if (barrier_value_) cudaFree(barrier_value_);
  if (gathered_) cudaEventDestroy(gathered_);
  if (caller_ready_) cudaEventDestroy(caller_ready_);
  if (stream_) cudaStreamDestroy(stream_);
  if (owned_ && comm_) ncclCommDestroy(comm_);
  if (previous >= 0) cudaSetDevice(previous);
}

void NcclCommunicator::follow(Stream stream) {
  FA_CUDA_CHECK(cudaEventRecord(caller_ready_, cuda_stream(stream)));
  FA_CUDA_CHECK(cudaStreamWaitEvent(stream_, caller_ready_, 0));
}

std::unique_ptr<Communicator::Pending> NcclCommunicator::start_ring_shift(const void* send, void* recv, size_t bytes,
                                                                          Stream stream) {
  // Every rank shifts blocks of the same size, so all skip an empty one alike.
  if (bytes == 0) return std::make_unique<NcclPending>(device_, nullptr);
  DeviceGuard guard(device_);
  follow(stream);
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  check_nccl(ncclGroupStart(), "ncclGroupStart", comm_);
  check_nccl(ncclSend(send, bytes, ncclUint8, next, comm_, stream_), "ncclSend", comm_);
  check_nccl(ncclRecv(recv, bytes, ncclUint8, prev, comm_, stream_), "ncclRecv", comm_);
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_);
  cudaEvent_t done = nullptr;
  FA_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(done, stream_);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(done);
    FA_CUDA_CHECK(recorded);
  }
  return std::make_unique<NcclPending>(device_, done);
}

void NcclCommunicator::allgather(const void* send, void* recv, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  follow(stream);
  check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_), "ncclAllGather", comm_);
  FA_CUDA_CHECK(cudaEventRecord(gathered_, stream_));
  FA_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), gathered_, 0));
}

void NcclCommunicator::barrier() {
  DeviceGuard guard(device_);
  check_nccl(ncclAllReduce(barrier_value_, barrier_value_, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce",
             comm_);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace flashattn::dist
