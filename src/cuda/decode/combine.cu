// The split combine kernel: one warp per packed row (b, hk, r), rows in the partials' order
// ((b * Hk + hk) * rows + r); combine_row.cuh has the arithmetic. Launched after the attention kernel
// where a row tile has more rows than its block can combine itself (decode.h, combine_in_kernel). A
// plain launch: with programmatic dependent launch (its blocks scheduled during the attention and
// waiting for it) 16 query tokens at batch 1 ran 12% slower on the H200 (bench/NOTES.md, decode v8).

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/decode/combine_row.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::detail::cuda::decode {

namespace {

constexpr int kCombineWarps = 4;

template <typename T>
__global__ void __launch_bounds__(32 * kCombineWarps)
    decode_combine_kernel(const KVCacheProblem p, const DecodeArgs a) {
  __shared__ float weights[kCombineWarps][kMaxSplits];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + warp;
  if (row >= p.batch * p.heads_k * a.rows) return;  // whole warps only: nothing synchronises across warps
  combine_split_row<T, false>(p, a, row, weights[warp], lane);
}

}  // namespace

void launch_combine(const KVCacheProblem& p, const DecodeArgs& a, cudaStream_t stream) {
  const int64_t rows_all = p.batch * p.heads_k * a.rows;
  const dim3 grid = grid_1d(ceil_div(rows_all, kCombineWarps), "cuda_decode combine");
  if (p.dtype == DType::f16)
    decode_combine_kernel<__half><<<grid, 32 * kCombineWarps, 0, stream>>>(p, a);
  else
    decode_combine_kernel<__nv_bfloat16><<<grid, 32 * kCombineWarps, 0, stream>>>(p, a);
  FA_CUDA_CHECK_LAUNCH("cuda_decode combine");
}

}  // namespace flashattn::detail::cuda::decode
