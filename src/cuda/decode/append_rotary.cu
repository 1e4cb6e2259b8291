// cuda_decode's append + rotary kernel (attn/append_rotary.cuh says what it does), run on the call's stream
// before the attention kernel, so the attention reads the appended cache.

#include <cuda_runtime.h>

#include "cuda/attn/append_rotary.cuh"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::detail::cuda::decode {

namespace {

using attn::kAppendWarps;

template <typename T, typename C>
__global__ void __launch_bounds__(32 * kAppendWarps) append_rotary_kernel(const KVCacheProblem p, T* q_rot) {
  // The attention (or the counters' reset) may launch now: it waits for this grid before reading.
  pdl_launch_dependents();
  attn::append_rotary_row<T, C>(p, q_rot, int(blockIdx.x) * kAppendWarps + int(threadIdx.x) / 32,
                                int(threadIdx.x) % 32);
}

}  // namespace

bool launch_append_rotary(const KVCacheProblem& p, void* q_rot, cudaStream_t stream) {
  const int64_t rows = p.batch * p.seqlen_new * p.heads_k + (q_rot ? p.batch * p.seqlen_q * p.heads : 0);
  if (rows == 0) return false;
  const dim3 grid = grid_1d(ceil_div(rows, kAppendWarps), "cuda_decode append");
  const bool fp8 = p.cache_dtype == DType::fp8_e4m3;
  if (p.dtype == DType::f16) {
    const auto kernel = fp8 ? append_rotary_kernel<__half, uint8_t> : append_rotary_kernel<__half, __half>;
    kernel<<<grid, 32 * kAppendWarps, 0, stream>>>(p, static_cast<__half*>(q_rot));
  } else {
    const auto kernel =
        fp8 ? append_rotary_kernel<__nv_bfloat16, uint8_t> : append_rotary_kernel<__nv_bfloat16, __nv_bfloat16>;
    kernel<<<grid, 32 * kAppendWarps, 0, stream>>>(p, static_cast<__nv_bfloat16*>(q_rot));
  }
  FA_CUDA_CHECK_LAUNCH("cuda_decode append");
  return true;
}

}  // namespace flashattn::detail::cuda::decode
