// LocalCommunicator: the ring of one. Host buffers are copied with memcpy; CUDA buffers (builds with
// CUDA) with a device-to-device cudaMemcpyAsync on the caller's stream, so a ring of one on a GPU runs
// entirely in stream order and times only the ring's own work.

#include <cstring>
#include <string>

#include "flashattn/dist.h"
#include "flashattn/error.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#endif

namespace flashattn::dist {

namespace {

// A ring of one sends to itself: the copy is started (host: done) when the shift starts and is ordered
// before later work on the same stream, so waiting has nothing to do.
class Done final : public Communicator::Pending {
 public:
  void wait(Stream) override {}
};

void copy_bytes(Device device, const void* send, void* recv, size_t bytes, Stream stream) {
  if (bytes == 0) return;
#if defined(FLASHATTN_WITH_CUDA)
  if (device.type == DeviceType::cuda) {
    detail::cuda::DeviceGuard guard(device);
    FA_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
    return;
  }
#else
  (void)device;
  (void)stream;
#endif
  std::memcpy(recv, send, bytes);
}

}  // namespace

LocalCommunicator::LocalCommunicator(Device device) : device_(device) {
  if (device.type == DeviceType::cpu) return;
#if defined(FLASHATTN_WITH_CUDA)
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: report it as the argument error below
    visible = 0;
  }
  if (device.type == DeviceType::cuda && device.index >= 0 && device.index < visible) return;
  throw Error(Status::invalid_argument,
              "flashattn::dist::LocalCommunicator: device: expected cpu or a visible CUDA device (" +
                  std::to_string(visible) + " visible), got " + device_name(device));
#else
  throw Error(
      Status::unsupported,
      "flashattn::dist::LocalCommunicator: device: expected cpu in a build without CUDA, got " + device_name(device));
#endif
}

std::unique_ptr<Communicator::Pending> LocalCommunicator::start_ring_shift(const void* send, void* recv, size_t bytes,
                                                                           Stream stream) {
  copy_bytes(device_, send, recv, bytes, stream);
  return std::make_unique<Done>();
}

void LocalCommunicator::allgather(const void* send, void* recv, size_t bytes, Stream stream) {
  copy_bytes(device_, send, recv, bytes, stream);
}

}  // namespace flashattn::dist
