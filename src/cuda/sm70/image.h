#pragma once

// The sm_70 image of cuda_sm70 (cmake/FlashattnSm70.cmake): its kernels, embedded in the library as a
// compressed fatbin of sm_70 PTX and, when the build had a CUDA 12 ptxas, an sm_70 cubin, loaded with the
// runtime's library API on first use. A Volta GPU runs them (CUDA 13 builds nothing it can run
// otherwise); later GPUs run the same kernels compiled into the library, or the image's PTX when
// FLASHATTN_SM70_IMAGE=1 (which checks the loading path on any GPU).

#include <cuda_runtime_api.h>

#include <string>

namespace flashattn::detail::cuda::sm70 {

// Whether cuda_sm70 launches the image's kernels on `device`: compute capability 7.x, or the variable set.
bool runs_image(int device);

// The image's kernel `name` (an entry of image_entries.cu), usable on `device` with `smem_bytes` of
// dynamic shared memory. Throws flashattn::Error when the image cannot be loaded or lacks the kernel.
cudaKernel_t image_kernel(const std::string& name, int device, size_t smem_bytes);

// Launches `compiled` (a kernel of this library) or, where runs_image(device) and `image_name` is not
// null, the image's kernel of that name (the same code), with cudaLaunchKernel's `params` and `smem` bytes
// of dynamic shared memory (opted into either way). `what` names the launch in errors.
void launch_kernel(const void* compiled, const char* image_name, int device, dim3 grid, dim3 block, size_t smem,
                   void** params, cudaStream_t stream, const char* what);

}  // namespace flashattn::detail::cuda::sm70
