#pragma once

// Programmatic dependent launch (PDL, sm_90+): a kernel launched with it may be scheduled while the
// kernel before it in the stream is still running, so its launch latency and prologue overlap that
// kernel's tail. In exchange it must call pdl_wait() before it touches memory the earlier kernel
// writes, and before it exits: the wait returns once the earlier grid has completed and its writes are
// visible, so a chain of such kernels still completes in stream order for whatever runs after it.
// pdl_launch_dependents() lets the next kernel launch before this one finishes. Both are no-ops in code
// compiled for older architectures and in kernels launched without the attribute.
//
// Host side: launch_kernel() sets the attribute only when asked and when the kernel's code was built
// from PTX for sm_90 or newer (ptxVersion; code built for sm_80 and JIT-compiled on a Hopper GPU has no
// wait instruction, and launching it early would race).

#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"

namespace flashattn::detail::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether `kernel`'s code on `device` (the current device) contains the PDL instructions; read once
// per kernel and device.
template <typename... Params>
bool pdl_capable(void (*kernel)(Params...), int device) {
  return once_per_kernel<bool>(reinterpret_cast<const void*>(kernel), device, [&] {
    cudaFuncAttributes attr{};
    FA_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return attr.ptxVersion >= 90;
  });
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialisation when `pdl`.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                   const char* name, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = pdl ? attr : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) throw_cuda_error(err, name, __FILE__, __LINE__);
}

}  // namespace flashattn::detail::cuda
