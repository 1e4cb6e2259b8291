#pragma once

// The MPI transport of flashattn::dist (library flashattn::dist_mpi, built when MPI is found).

#include <mpi.h>

#include "flashattn/dist.h"

namespace flashattn::dist {

// Wraps an MPI communicator (not owned, not freed; MPI must be initialised and outlive this object).
// Ranks and the ring order are those of `comm`.
//
// Host tensors are sent as they are. CUDA tensors (device = Device::cuda(i), only in builds with CUDA)
// take the host-staged path: start_ring_shift copies `send` to pinned host memory on `stream` and
// synchronises that stream before handing the copy to MPI, and wait() copies the received bytes back to
// `recv` on `stream`. The staging buffers are reused across calls and grow to the largest transfer. This
// path needs no CUDA-aware MPI; a CUDA-aware MPI or NCCL would avoid the two copies.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, Device device = Device::cpu());
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  MPI_Comm comm() const { return comm_; }

  std::unique_ptr<Pending> start_ring_shift(const void* send, void* recv, size_t bytes, Stream stream) override;
  void allgather(const void* send, void* recv, size_t bytes, Stream stream) override;
  void barrier() override;

  class Staging;  // pinned host buffers of the host-staged path (an implementation detail)

 private:
  MPI_Comm comm_;
  Device device_;
  int rank_ = 0, size_ = 1;
  int next_tag_ = 0;  // every shift gets its own tag, so concurrent shifts can never be confused
  std::unique_ptr<Staging> staging_;
};

}  // namespace flashattn::dist
