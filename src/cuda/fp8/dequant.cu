// The cuda_fp8 backend's conversion pass (dequant.h): one warp per (row, head), lanes over the head dim.
// e4m3 values are exact in fp32 (CUDA's cuda_fp8.h conversion); the product with the factor is rounded once
// to bf16 (nearest even).

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/fp8/dequant.h"

namespace flashattn::detail::cuda::fp8 {

namespace {

constexpr int kWarps = 8;

// The sequence of packed row i: the last b with cu_seqlens[b] <= i (rows past the last sequence, which no
// kernel reads, get the last one).
__device__ int64_t sequence_of(const int32_t* cu, int64_t batch, int64_t i) {
  int64_t lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (int64_t(cu[mid]) <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(32 * kWarps) dequant_kernel(const DequantRows d) {
  const int64_t task = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;  // (o * inner + i) * heads + h
  const int lane = int(threadIdx.x % 32);
  if (task >= d.outer * d.inner * d.heads) return;
  const int64_t h = task % d.heads, row = task / d.heads;
  const int64_t i = row % d.inner, o = row / d.inner;
  float factor = 1.0f;
  if (d.f1.ptr || d.f2.ptr) {
    const int64_t b = d.cu_seqlens ? sequence_of(d.cu_seqlens, d.batch, i) : o;
    factor = d.f1.at(b, h / d.group) * d.f2.at(b, h / d.group);
  }
  const uint8_t* src = static_cast<const uint8_t*>(d.src.ptr) + d.src.offset(o, i, h);
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(d.dst) + task * d.head_dim;
  for (int64_t x = lane; x < d.head_dim; x += 32) {
    const __half_raw hr = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(src[x]), __NV_E4M3);
    dst[x] = __float2bfloat16_rn(__half2float(__half(hr)) * factor);
  }
}

}  // namespace

void dequantise_rows(const DequantRows& d, cudaStream_t stream) {
  const int64_t tasks = d.outer * d.inner * d.heads;
  if (tasks == 0) return;
  dequant_kernel<<<grid_1d(ceil_div(tasks, kWarps), "cuda_fp8 dequantise"), 32 * kWarps, 0, stream>>>(d);
  FA_CUDA_CHECK_LAUNCH("cuda_fp8 dequantise");
}

}  // namespace flashattn::detail::cuda::fp8
