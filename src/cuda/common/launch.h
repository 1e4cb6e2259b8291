#pragma once

// Launch-configuration helpers shared by the CUDA backends: 1-D grids (large problem dimensions are
// folded into blockIdx.x, whose limit is 2^31 - 1, instead of gridDim.y/z, limited to 65535), the
// opt-in for more than 48 KB of dynamic shared memory per block, and a cache of per-kernel facts.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/common/check.h"
#include "flashattn/error.h"

namespace flashattn::detail::cuda {

inline constexpr int64_t kMaxGridX = 2147483647;        // gridDim.x limit on every architecture we build for
inline constexpr size_t kDefaultSmemLimit = 48 * 1024;  // dynamic shared memory usable without opt-in

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The 1-D grid of `blocks` blocks; supports_* functions reject problems above kMaxGridX, so reaching
// the throw here is a bug.
inline dim3 grid_1d(int64_t blocks, const char* kernel) {
  if (blocks < 1 || blocks > kMaxGridX)
    throw Error(Status::internal, std::string("flashattn: ") + kernel + ": grid of " + std::to_string(blocks) +
                                      " blocks outside [1, 2^31 - 1]");
  return dim3(static_cast<unsigned>(blocks));
}

// The most dynamic shared memory one block may use on `device` after opting in.
inline size_t max_smem_optin(int device) {
  int bytes = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(bytes);
}

// Allows `kernel` to be launched with `bytes` of dynamic shared memory on the current device. Without
// the opt-in a block may use 48 KB in all, static (the kernel's __shared__ variables, about
// `static_bytes`: ptxas rounds it up) and dynamic together, so a kernel with static shared memory always
// opts in. The device limit is read, not assumed: it differs between sm_80, sm_86 and sm_90.
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes, int device, const char* name, size_t static_bytes = 0) {
  if (bytes <= kDefaultSmemLimit && static_bytes == 0) return;
  const size_t limit = max_smem_optin(device);
  if (bytes + static_bytes > limit)
    throw Error(Status::unsupported,
                std::string("flashattn: ") + name + ": needs " + std::to_string(bytes + static_bytes) +
                    " bytes of shared memory per block, the device allows " + std::to_string(limit));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// compute(), run once per (kernel, device) for this call site and remembered: a kernel's attributes and
// occupancy do not change while the process runs. Keyed by the kernel's address, since kernels of one
// signature share a type. Thread-safe.
template <typename Value, typename Compute>
Value once_per_kernel(const void* kernel, int device, Compute&& compute) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, Value> values;
  const std::pair<const void*, int> key{kernel, device};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = values.find(key);
  if (it == values.end()) it = values.emplace(key, compute()).first;
  return it->second;
}

}  // namespace flashattn::detail::cuda
