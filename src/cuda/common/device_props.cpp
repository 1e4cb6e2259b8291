#include "cuda/common/device_props.h"

#include <map>
#include <mutex>

namespace flashattn::detail::cuda {

const DeviceProps& device_props(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceProps> cache;  // std::map: references stay valid as devices are added
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  DeviceProps d;
  int smem = 0, smem_sm = 0, l2 = 0;
  cudaError_t err = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so the caller's next CUDA call does not see it
    d = DeviceProps{};
    d.status = err;
    d.error = std::string("cannot query cuda:") + std::to_string(device) + ": " + cudaGetErrorString(err);
  } else {
    d.smem_optin = smem;
    d.smem_per_sm = smem_sm;
    d.l2_bytes = l2;
  }
  return cache.emplace(device, d).first->second;
}

std::string compiled_kernels_reason(int device) {
  const DeviceProps& d = device_props(device);
  if (!d.error.empty() || d.major >= 8) return {};
  return "this build's kernels need compute capability >= 8.0, cuda:" + std::to_string(device) + " is " +
         std::to_string(d.major) + "." + std::to_string(d.minor) + " (cuda_sm70 runs Volta)";
}

}  // namespace flashattn::detail::cuda
