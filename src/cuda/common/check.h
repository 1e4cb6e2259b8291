#pragma once

// CUDA error handling: every runtime call and kernel launch goes through FA_CUDA_CHECK /
// FA_CUDA_CHECK_LAUNCH, which turn failures into flashattn::Error(Status::device_error) with the call
// site, so no CUDA failure is silently ignored and none aborts the process.

#include <cuda_runtime_api.h>

#include <string>

#include "flashattn/error.h"

namespace flashattn::detail::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  const Status status = err == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::device_error;
  throw Error(status, std::string("flashattn: CUDA error in ") + what + " (" + file + ":" + std::to_string(line) +
                          "): " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace flashattn::detail::cuda

#define FA_CUDA_CHECK(expr)                                                                                      \
  do {                                                                                                           \
    const cudaError_t fa_err_ = (expr);                                                                          \
    if (fa_err_ != cudaSuccess) ::flashattn::detail::cuda::throw_cuda_error(fa_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports launch-configuration errors without synchronising.
#define FA_CUDA_CHECK_LAUNCH(name)                                                                              \
  do {                                                                                                          \
    const cudaError_t fa_err_ = cudaGetLastError();                                                             \
    if (fa_err_ != cudaSuccess) ::flashattn::detail::cuda::throw_cuda_error(fa_err_, name, __FILE__, __LINE__); \
  } while (0)
