#pragma once

// The NCCL transport of flashattn::dist (library flashattn::dist_nccl, built with CUDA when NCCL is
// found; -DFLASHATTN_NCCL=AUTO|ON|OFF).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "flashattn/dist.h"

namespace flashattn::dist {

// Ring shifts are an ncclSend to rank + 1 and an ncclRecv from rank - 1 in one group; allgather is
// ncclAllGather; barrier a one-element ncclAllReduce waited for on the host. Buffers are CUDA memory of
// the communicator's device.
//
// Streams: every NCCL call of this communicator runs on one internal stream (non-blocking, highest
// priority), never on the caller's. start_ring_shift makes the internal stream wait for the caller's
// stream (an event: the bytes to send are written), queues the transfer there and returns;
// Pending::wait(stream) makes the caller's stream wait for the transfer (another event) and returns at
// once, without blocking the host. The attention a ring step queues on the caller's stream between the
// two runs concurrently with the transfer. (With NCCL on the caller's stream the transfer of the next
// block would queue behind the current block's attention and nothing would overlap.) The high priority
// lets NCCL's few blocks take SMs as soon as any frees, instead of after the attention grid drains.
class NcclCommunicator final : public Communicator {
 public:
  // Wraps an existing communicator (not owned, not destroyed: it must outlive this object). Rank, size
  // and device are the communicator's.
  explicit NcclCommunicator(ncclComm_t comm);
  // Creates and owns a communicator of `size` ranks (ncclCommInitRank): every rank calls this with the
  // same `id` (ncclGetUniqueId on one rank, sent to the others by the caller, e.g. over MPI) and its own
  // `rank`, each on its own CUDA `device`. Collective and blocking.
  NcclCommunicator(int rank, int size, const ncclUniqueId& id, Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  ncclComm_t comm() const { return comm_; }
  // The internal stream the NCCL calls run on.
  cudaStream_t comm_stream() const { return stream_; }

  std::unique_ptr<Pending> start_ring_shift(const void* send, void* recv, size_t bytes, Stream stream) override;
  void allgather(const void* send, void* recv, size_t bytes, Stream stream) override;
  void barrier() override;

 private:
  void create_resources();
  // Makes the internal stream wait for the work queued on `stream` so far.
  void follow(Stream stream);

  ncclComm_t comm_ = nullptr;
  bool owned_ = false;
  Device device_;
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_ready_ = nullptr;  // recorded on the caller's stream by follow()
  cudaEvent_t gathered_ = nullptr;      // recorded on the internal stream after an allgather
  float* barrier_value_ = nullptr;      // one float on the device for barrier()'s allreduce
};

}  // namespace flashattn::dist
