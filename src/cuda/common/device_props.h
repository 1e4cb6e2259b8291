#pragma once

// The device attributes the CUDA backends decide with (supports_* and the launch code), read once per
// device and kept for the process: they do not change while it runs. Thread-safe.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace flashattn::detail::cuda {

struct DeviceProps {
  cudaError_t status = cudaSuccess;  // what reading the attributes returned
  std::string error;                 // non-empty when they could not be read (the fields are then 0)
  int major = 0, minor = 0;          // compute capability
  int sms = 0;                       // multiprocessors
  int64_t smem_optin = 0;            // shared memory one CTA may opt into
  int64_t smem_per_sm = 0;           // shared memory of one multiprocessor
  int64_t l2_bytes = 0;
};

// The reference stays valid for the process. A device whose attributes cannot be read keeps its error:
// the backends report it as their reason (supports_*) or throw it (run).
const DeviceProps& device_props(int device);

// Why the kernels nvcc compiled into this build cannot run on `device` ("" when they can, or when its
// attributes cannot be read: the caller reports that): every architecture of FLASHATTN_CUDA_ARCHS that
// nvcc builds is sm_80 or newer, so a Volta GPU runs only cuda_sm70's embedded image (sm70/image.h).
std::string compiled_kernels_reason(int device);

}  // namespace flashattn::detail::cuda
