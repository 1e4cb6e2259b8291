// The split combine kernel: one warp per packed row (b, hk, r), rows in the partials' order
// ((b * Hk + hk) * rows + r); combine_row.cuh has the arithmetic. Launched after the attention kernel
// with programmatic dependent launch (cuda/common/pdl.cuh): the attention lets it launch once each of its
// blocks has left the main loop, and its blocks wait for the attention grid to complete before they read
// the partials. Measured on the H200 against the attention's last block combining the splits itself
// behind a counter reset (bench/NOTES.md): batch 1 x 4k 18.2 -> 17.2 us with the workspace allocated
// per call, and no counters to zero.
#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/decode/combine_row.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::detail::cuda::decode {

namespace {

constexpr int kCombineWarps = 4;

template <typename T>
__global__ void __launch_bounds__(32 * kCombineWarps)
    decode_combine_kernel(const KVCacheProblem p, const DecodeArgs a) {
  pdl_wait();
  __shared__ float weights[kCombineWarps][kMaxSplits];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + warp;
  if (row >= p.batch * p.heads_k * a.rows) return;  // whole warps only: nothing synchronises across warps
  combine_split_row<T>(p, a, row, weights[warp], lane);
}

}  // namespace

void launch_combine(const KVCacheProblem& p, const DecodeArgs& a, cudaStream_t stream) {
  const int64_t rows_all = p.batch * p.heads_k * a.rows;
  const dim3 grid = grid_1d(ceil_div(rows_all, kCombineWarps), "cuda_decode combine");
  const auto kernel = p.dtype == DType::f16 ? decode_combine_kernel<__half> : decode_combine_kernel<__nv_bfloat16>;
  launch_kernel(kernel, grid, 32 * kCombineWarps, 0, stream, pdl_capable(kernel, int(p.device.index)),
                "cuda_decode combine", p, a);
}

}  // namespace flashattn::detail::cuda::decode
