// MpiCommunicator: non-blocking point-to-point shifts (MPI_Isend/MPI_Irecv) and MPI_Allgather, with a
// host-staged path for CUDA buffers in builds with CUDA.

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "flashattn/dist_mpi.h"
#include "flashattn/error.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#endif

namespace flashattn::dist {

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(Status::device_error,
              std::string("flashattn::dist::MpiCommunicator: ") + what + " failed: " + std::string(text, size_t(len)));
}

// MPI counts are int: larger transfers go as several messages of at most this many bytes. Messages of one
// (source, tag, communicator) are matched in order, so the pieces reassemble correctly.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;

// The largest tag every MPI implementation must accept (MPI_TAG_UB >= 32767).
constexpr int kTagLimit = 32768;

}  // namespace

// Pinned host buffers for the host-staged CUDA path, reused across shifts. A shift holds two (send and
// receive) until it is waited for; at most a few shifts are in flight, so the pool stays small.
class MpiCommunicator::Staging {
 public:
  struct Host {
    void* data = nullptr;
    size_t bytes = 0;
  };
  ~Staging() {
#if defined(FLASHATTN_WITH_CUDA)
    for (Host& h : free_) cudaFreeHost(h.data);
#endif
  }
  Host take(size_t bytes) {
    auto it = std::find_if(free_.begin(), free_.end(), [&](const Host& h) { return h.bytes >= bytes; });
    if (it != free_.end()) {
      Host h = *it;
      free_.erase(it);
      return h;
    }
    Host h;
#if defined(FLASHATTN_WITH_CUDA)
    FA_CUDA_CHECK(cudaMallocHost(&h.data, bytes));
#endif
    h.bytes = bytes;
    return h;
  }
  void give(Host h) {
    if (h.data) free_.push_back(h);
  }

 private:
  std::vector<Host> free_;
};

namespace {

class MpiPending final : public Communicator::Pending {
 public:
  using Host = MpiCommunicator::Staging::Host;

  MpiPending(std::vector<MPI_Request> requests, MpiCommunicator::Staging* staging, Device device, Host send_stage,
             Host recv_stage, void* recv, size_t bytes)
      : requests_(std::move(requests)),
        staging_(staging),
        device_(device),
        send_stage_(send_stage),
        recv_stage_(recv_stage),
        recv_(recv),
        bytes_(bytes) {}

  // Completing here keeps the buffers valid for MPI even when the owner unwinds without waiting.
  ~MpiPending() override {
    if (!requests_.empty()) MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    release_stages();
  }

  void wait(Stream stream) override {
    if (requests_.empty()) return;
    check_mpi(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    requests_.clear();
#if defined(FLASHATTN_WITH_CUDA)
    if (recv_stage_.data) {
      detail::cuda::DeviceGuard guard(device_);
      const cudaStream_t s = static_cast<cudaStream_t>(stream);
      FA_CUDA_CHECK(cudaMemcpyAsync(recv_, recv_stage_.data, bytes_, cudaMemcpyHostToDevice, s));
      // The staging buffer returns to the pool: the copy out of it must be done first.
      FA_CUDA_CHECK(cudaStreamSynchronize(s));
    }
#else
    (void)stream;
#endif
    release_stages();
  }

 private:
  void release_stages() {
    if (!staging_) return;
    staging_->give(send_stage_);
    staging_->give(recv_stage_);
    send_stage_ = recv_stage_ = Host{};
  }

  std::vector<MPI_Request> requests_;
  MpiCommunicator::Staging* staging_;
  Device device_;
  Host send_stage_, recv_stage_;
  void* recv_;
  size_t bytes_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, Device device)
    : comm_(comm), device_(device), staging_(std::make_unique<Staging>()) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    throw Error(Status::invalid_argument,
                "flashattn::dist::MpiCommunicator: comm: expected a communicator of an initialised MPI, got one "
                "before MPI_Init");
#if !defined(FLASHATTN_WITH_CUDA)
  if (device.type != DeviceType::cpu)
    throw Error(Status::unsupported,
                "flashattn::dist::MpiCommunicator: device: expected cpu in a build without "
                "CUDA, got " +
                    device_name(device));
#endif
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<Communicator::Pending> MpiCommunicator::start_ring_shift(const void* send, void* recv, size_t bytes,
                                                                         Stream stream) {
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  const int tag = next_tag_;
  next_tag_ = (next_tag_ + 1) % kTagLimit;
  Staging::Host send_stage, recv_stage;
  const void* send_host = send;
  void* recv_host = recv;
#if defined(FLASHATTN_WITH_CUDA)
  if (device_.type == DeviceType::cuda && bytes > 0) {
    detail::cuda::DeviceGuard guard(device_);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    send_stage = staging_->take(bytes);
    recv_stage = staging_->take(bytes);
    FA_CUDA_CHECK(cudaMemcpyAsync(send_stage.data, send, bytes, cudaMemcpyDeviceToHost, s));
    // MPI reads the host copy as soon as the send is posted: the copy must have landed.
    FA_CUDA_CHECK(cudaStreamSynchronize(s));
    send_host = send_stage.data;
    recv_host = recv_stage.data;
  }
#else
  (void)stream;
#endif
  std::vector<MPI_Request> requests;
  for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
    const int n = int(std::min(kMaxMessageBytes, bytes - off));
    MPI_Request r;
    check_mpi(MPI_Irecv(static_cast<char*>(recv_host) + off, n, MPI_BYTE, prev, tag, comm_, &r), "MPI_Irecv");
    requests.push_back(r);
    check_mpi(MPI_Isend(static_cast<const char*>(send_host) + off, n, MPI_BYTE, next, tag, comm_, &r), "MPI_Isend");
    requests.push_back(r);
  }
  return std::make_unique<MpiPending>(std::move(requests), staging_.get(), device_, send_stage, recv_stage, recv,
                                      bytes);
}

void MpiCommunicator::allgather(const void* send, void* recv, size_t bytes, Stream stream) {
  if (bytes > size_t(INT_MAX))
    throw Error(Status::invalid_argument, "flashattn::dist::MpiCommunicator::allgather: bytes: expected at most " +
                                              std::to_string(INT_MAX) + " per rank, got " + std::to_string(bytes));
  const void* send_host = send;
  void* recv_host = recv;
  Staging::Host send_stage, recv_stage;
#if defined(FLASHATTN_WITH_CUDA)
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool staged = device_.type == DeviceType::cuda && bytes > 0;
  if (staged) {
    detail::cuda::DeviceGuard guard(device_);
    send_stage = staging_->take(bytes);
    recv_stage = staging_->take(bytes * size_t(size_));
    FA_CUDA_CHECK(cudaMemcpyAsync(send_stage.data, send, bytes, cudaMemcpyDeviceToHost, s));
    FA_CUDA_CHECK(cudaStreamSynchronize(s));
    send_host = send_stage.data;
    recv_host = recv_stage.data;
  }
#else
  (void)stream;
#endif
  check_mpi(MPI_Allgather(send_host, int(bytes), MPI_BYTE, recv_host, int(bytes), MPI_BYTE, comm_), "MPI_Allgather");
#if defined(FLASHATTN_WITH_CUDA)
  if (staged) {
    detail::cuda::DeviceGuard guard(device_);
    FA_CUDA_CHECK(cudaMemcpyAsync(recv, recv_stage.data, bytes * size_t(size_), cudaMemcpyHostToDevice, s));
    FA_CUDA_CHECK(cudaStreamSynchronize(s));
  }
#endif
  staging_->give(send_stage);
  staging_->give(recv_stage);
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

}  // namespace flashattn::dist
