#pragma once

// Stream-ordered scratch memory for kernels that need it (the documented workspaces: the naive
// backend's score matrix, split-KV partials, fp32 dQ accumulators). cudaMallocAsync draws from the
// device's memory pool, so repeated calls reuse memory without a device-wide synchronisation, and the
// allocation is legal inside CUDA graph capture.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/common/check.h"

namespace flashattn::detail::cuda {

class Workspace {
 public:
  Workspace(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) FA_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~Workspace() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace flashattn::detail::cuda
