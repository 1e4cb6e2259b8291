#include "buffer.h"

#include <cstring>
#include <utility>

#include "flashattn/error.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/common/check.h"
#endif

namespace fabench {

namespace {

bool on_cuda(Device d) { return d.type == flashattn::DeviceType::cuda; }

#if defined(FLASHATTN_WITH_CUDA)
size_t bytes_of(DType dtype, int64_t numel) { return size_t(numel) * size_t(flashattn::dtype_size(dtype)); }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
#else
[[noreturn]] void no_cuda() {
  throw flashattn::Error(flashattn::Status::unsupported,
                         "flashattn-bench: CUDA buffer requested in a build without CUDA");
}
#endif

}  // namespace

Buffer::Buffer(Device device, DType dtype, int64_t numel, void* stream)
    : device_(device), dtype_(dtype), numel_(numel), stream_(stream) {
  if (!on_cuda(device)) {
    host_ = HostArray(dtype, numel);
    return;
  }
#if defined(FLASHATTN_WITH_CUDA)
  FA_CUDA_CHECK(cudaMalloc(&cuda_ptr_, bytes_of(dtype, numel)));
#else
  no_cuda();
#endif
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept
    : device_(o.device_),
      dtype_(o.dtype_),
      numel_(o.numel_),
      stream_(o.stream_),
      host_(std::move(o.host_)),
      cuda_ptr_(std::exchange(o.cuda_ptr_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    dtype_ = o.dtype_;
    numel_ = o.numel_;
    stream_ = o.stream_;
    host_ = std::move(o.host_);
    cuda_ptr_ = std::exchange(o.cuda_ptr_, nullptr);
  }
  return *this;
}

void Buffer::release() {
#if defined(FLASHATTN_WITH_CUDA)
  // A destructor must not throw; a failed free after a device fault is reported by the next checked call.
  if (cuda_ptr_) cudaFree(cuda_ptr_);
#endif
  cuda_ptr_ = nullptr;
}

Tensor Buffer::view(std::initializer_list<int64_t> shape) const {
  void* data = on_cuda(device_) ? cuda_ptr_ : const_cast<void*>(host_.data());
  return Tensor::contiguous(data, dtype_, shape, device_);
}

void Buffer::upload(const HostArray& host) {
  if (host.dtype() != dtype_ || host.numel() != numel_)
    throw flashattn::Error(flashattn::Status::internal, "Buffer::upload: host array of " +
                                                            std::to_string(host.numel()) + " elements, buffer of " +
                                                            std::to_string(numel_));
  if (!on_cuda(device_)) {
    std::memcpy(host_.data(), host.data(), host.nbytes());
    return;
  }
#if defined(FLASHATTN_WITH_CUDA)
  FA_CUDA_CHECK(cudaMemcpyAsync(cuda_ptr_, host.data(), host.nbytes(), cudaMemcpyHostToDevice, as_stream(stream_)));
  FA_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
#endif
}

HostArray Buffer::download() const {
  if (!on_cuda(device_)) return host_;
  HostArray out(dtype_, numel_);
#if defined(FLASHATTN_WITH_CUDA)
  FA_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
  FA_CUDA_CHECK(cudaMemcpyAsync(out.data(), cuda_ptr_, out.nbytes(), cudaMemcpyDeviceToHost, as_stream(stream_)));
  FA_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
#endif
  return out;
}

void Buffer::poison() {
  if (!on_cuda(device_)) {
    std::memset(host_.data(), 0xFF, host_.nbytes());
    return;
  }
#if defined(FLASHATTN_WITH_CUDA)
  FA_CUDA_CHECK(cudaMemsetAsync(cuda_ptr_, 0xFF, bytes_of(dtype_, numel_), as_stream(stream_)));
#endif
}

}  // namespace fabench
