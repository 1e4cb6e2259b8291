// Split-KV combine: out = sum_s exp(lse_s - lse) * out_s with lse = log(sum_s exp(lse_s)), where out_s
// is split s's normalised output and lse_s its natural-log LSE (-inf when the split saw no key: weight
// 0). A row no split saw gets out 0 and LSE +inf.
//
// One warp per packed row (b, hk, r), rows in the partials' order ((b * Hk + hk) * rows + r). The lanes
// first reduce the split LSEs (split s = lane + 32 k), store the weights in shared memory, then each
// lane accumulates 4 dims (d = 4 lane + 128 k) over the splits with float4 loads: a warp reads 512
// contiguous bytes per split.

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.h"
#include "cuda/decode/decode.h"

namespace flashattn::detail::cuda::decode {

namespace {

constexpr int kCombineWarps = 4;
constexpr int kLoadsInFlight = 8;  // partial rows a lane loads before it accumulates them

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T>
__device__ __forceinline__ void store4(T* dst, float4 v) {
  uint2 packed;
  packed.x = ptx::pack2<T>(v.x, v.y);
  packed.y = ptx::pack2<T>(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) = packed;  // out rows are 16-byte aligned (supports), d % 4 == 0
}

template <typename T>
__global__ void __launch_bounds__(32 * kCombineWarps)
    decode_combine_kernel(const KVCacheProblem p, const DecodeArgs a) {
  __shared__ float weights[kCombineWarps][kMaxSplits];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t rows_all = p.batch * p.heads_k * a.rows;  // also the stride between splits, in rows
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + warp;
  if (row >= rows_all) return;  // whole warps only: nothing below synchronises across warps

  const int mr = int(row % a.rows);
  const int64_t hk = (row / a.rows) % p.heads_k, b = row / a.rows / p.heads_k;
  const int64_t i = mr / a.group, h = hk * a.group + mr % a.group;
  T* out = static_cast<T*>(p.out.ptr) + p.out.offset(b, i, h);
  const int dim = int(p.head_dim);
  const int splits = a.num_splits;

  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, a.part_lse[s * rows_all + row]);
  m = warp_max(m);
  if (m == -INFINITY) {
    for (int d = 4 * lane; d < dim; d += 128) store4(out + d, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    if (lane == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, i, h)] = INFINITY;
    return;
  }
  float sum = 0.0f;
  for (int s = lane; s < splits; s += 32) sum += expf(a.part_lse[s * rows_all + row] - m);
  const float lse = m + logf(warp_sum(sum));
  for (int s = lane; s < splits; s += 32) weights[warp][s] = expf(a.part_lse[s * rows_all + row] - lse);
  __syncwarp();

  for (int d = 4 * lane; d < dim; d += 128) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float* src = a.part_out + row * dim + d;
    for (int s0 = 0; s0 < splits; s0 += kLoadsInFlight) {
      // All loads of a batch are issued before the first is used: each is an L2 (or DRAM) round trip,
      // and one at a time they made this kernel ~20 us at batch 1 (bench/NOTES.md, decode v3).
      float w[kLoadsInFlight];
      float4 v[kLoadsInFlight];
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k) {
        const int s = s0 + k;
        w[k] = s < splits ? weights[warp][s] : 0.0f;
        // A split without visible keys (weight 0) is never read: its partial may be unwritten.
        v[k] = w[k] != 0.0f ? *reinterpret_cast<const float4*>(src + s * rows_all * dim)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k) {  // in split order, as before: the same sums bitwise
        acc.x += w[k] * v[k].x;
        acc.y += w[k] * v[k].y;
        acc.z += w[k] * v[k].z;
        acc.w += w[k] * v[k].w;
      }
    }
    store4(out + d, acc);
  }
  if (lane == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, i, h)] = lse;
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
