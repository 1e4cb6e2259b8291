#pragma once

// One allocation on the device a backend runs on: host memory for CPU backends, CUDA memory otherwise.
// Every copy and fill goes through `stream` (a cudaStream_t; ignored on the CPU), so it is ordered with
// the kernels the bench launches on that stream however the stream was created.

#include <cstdint>

#include "flashattn/tensor.h"
#include "host_array.h"

namespace fabench {

using flashattn::Device;
using flashattn::Tensor;

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, DType dtype, int64_t numel, void* stream);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // A contiguous view with the given shape (whose product must be the buffer's numel).
  Tensor view(std::initializer_list<int64_t> shape) const;
  void upload(const HostArray& host);  // returns once the copy is complete
  HostArray download() const;          // waits for the stream first
  void poison();                       // all bytes 0xFF: NaN in f32, f16 and bf16; asynchronous on CUDA

 private:
  void release();

  Device device_{};
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
  void* stream_ = nullptr;
  HostArray host_;            // storage on the CPU
  void* cuda_ptr_ = nullptr;  // storage on CUDA
};

}  // namespace fabench
