#pragma once

// Stream-ordered scratch memory for kernels that need it (the documented workspaces: the naive
// backend's score matrix, split-KV partials, fp32 dQ accumulators). cudaMallocAsync draws from the
// device's memory pool, so repeated calls reuse memory without a device-wide synchronisation, and the
// allocation is legal inside CUDA graph capture. A caller's allocator (KVCacheParams::workspace_allocator)
// replaces it where one is given: its memory is the caller's to reclaim, and a graph captured around the
// call then holds no allocation nodes.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "flashattn/error.h"

namespace flashattn::detail::cuda {

class Workspace {
 public:
  // From `allocator` (with `context`) when it is not null, else from cudaMallocAsync. The memory is
  // kAlignment-byte aligned either way (cudaMallocAsync's is; the caller's is aligned up within a slightly
  // larger request).
  Workspace(size_t bytes, cudaStream_t stream, void* (*allocator)(size_t, void*) = nullptr, void* context = nullptr)
      : stream_(stream) {
    if (!bytes) return;
    if (!allocator) {
      FA_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
      return;
    }
    void* p = allocator(bytes + kAlignment - 1, context);
    if (!p)
      throw Error(Status::out_of_memory, "flashattn: workspace_allocator: expected device memory of " +
                                             std::to_string(bytes + kAlignment - 1) + " bytes, got a null pointer");
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(p) + kAlignment - 1) / kAlignment * kAlignment;
    ptr_ = reinterpret_cast<void*>(aligned);
    owned_ = false;
  }
  ~Workspace() {
    if (ptr_ && owned_) cudaFreeAsync(ptr_, stream_);
  }
  static constexpr size_t kAlignment = 256;
  // `bytes` rounded up to kAlignment: the size of one part of a workspace shared by several buffers, so
  // that the next part starts aligned too.
  static constexpr size_t part_bytes(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  bool owned_ = true;
};

}  // namespace flashattn::detail::cuda
