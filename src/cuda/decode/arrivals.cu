// The reset of the in-kernel combine's arrival counters (DecodeArgs::arrivals) before the attention
// kernel. A kernel rather than cudaMemsetAsync, so that the chain append -> reset -> attention can use
// programmatic dependent launch throughout (pdl.cuh; a memset node cannot take part): without an append
// the attention streams K/V at once and waits for the reset only before it counts itself at the end.

#include <cuda_runtime.h>

#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::detail::cuda::decode {

namespace {

constexpr int kZeroThreads = 256;

__global__ void __launch_bounds__(kZeroThreads) zero_arrivals_kernel(int* counters, int64_t count) {
  pdl_launch_dependents();
  for (int64_t i = int64_t(blockIdx.x) * kZeroThreads + threadIdx.x; i < count; i += int64_t(gridDim.x) * kZeroThreads)
    counters[i] = 0;
  // Launched after the append kernel, this grid must not complete before it (pdl.cuh).
  pdl_wait();
}

}  // namespace

void launch_zero_arrivals(int* counters, int64_t count, int device, bool after_kernel, cudaStream_t stream) {
  // A few blocks at most: the counters are one per (sequence, kv head, row tile) of the call.
  const int64_t blocks = ceil_div(count, kZeroThreads) < 64 ? ceil_div(count, kZeroThreads) : 64;
  const bool pdl = after_kernel && pdl_capable(zero_arrivals_kernel, device);
  launch_kernel(zero_arrivals_kernel, grid_1d(blocks, "cuda_decode arrivals"), kZeroThreads, 0, stream, pdl,
                "cuda_decode arrivals", counters, count);
}

}  // namespace flashattn::detail::cuda::decode
