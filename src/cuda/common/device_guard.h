#pragma once

// Makes the call's device current for the lifetime of the guard and restores the caller's device
// afterwards, so a call on cuda:1 from a thread whose current device is cuda:0 launches on cuda:1.

#include <cuda_runtime_api.h>

#include "cuda/common/check.h"
#include "flashattn/tensor.h"

namespace flashattn::detail::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(Device device) {
    FA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device.index)
      FA_CUDA_CHECK(cudaSetDevice(device.index));
    else
      previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace flashattn::detail::cuda
