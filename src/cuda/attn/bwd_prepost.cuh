#pragma once

// The two light kernels around the backward main kernel (templated on the dtype only):
//  * bwd_dsum_kernel: D_i = rowsum(dO * O) in fp32 for every (query row, head), one warp per pair,
//    lane c reading the 16-byte chunk c of the row (head dims <= 256 = 32 chunks); it also zeroes the
//    pair's row of dq_accum (when there is one), which saves a separate memset pass over the workspace;
//  * bwd_dq_convert_kernel: dq = dq_accum rounded to the dtype (the scale is already inside dS), one
//    thread per 8 elements.
// The 8 dims of a chunk are contiguous in dq_accum's blocked layout too (dq_accum.h, dq_accum_offset).
// Both index query rows globally (global_q_row): row r of a dense call is (b, i) = (r / Sq, r % Sq), of
// a varlen call r itself (batch stride 0).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/attn/bwd_args.h"
#include "cuda/common/elem.cuh"
#include "cuda/common/ptx.h"

namespace flashattn::detail::cuda::attn {

inline constexpr int kPrepostThreads = 256;

// Element offset of global query row `row`, head h, in a RowsView of the call.
__device__ __forceinline__ int64_t row_offset(const BwdProblem& p, const RowsView& v, int64_t row, int64_t h) {
  if (p.cu_seqlens_q != nullptr) return v.offset(0, row, h);
  return v.offset(row / p.seqlen_q, row % p.seqlen_q, h);
}

// The body of bwd_dsum_kernel, for entry points of their own (the sm_70 image, sm70/image_entries.cu).
template <typename T>
__device__ __forceinline__ void bwd_dsum(const BwdArgs& args) {
  const BwdProblem& p = args.p;
  const int lane = int(threadIdx.x) & 31;
  const int64_t pair = int64_t(blockIdx.x) * (kPrepostThreads / 32) + threadIdx.x / 32;
  if (pair >= p.total_q * p.heads) return;
  const int64_t row = pair / p.heads, h = pair % p.heads;
  float acc = 0.0f;
  if (args.dq_accum != nullptr && lane < p.head_dim / 8) {
    float4* zero = reinterpret_cast<float4*>(args.dq_accum + dq_accum_offset(row, h, 8 * lane, p.heads, p.head_dim));
    zero[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    zero[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (lane < p.head_dim / 8) {
    float d[8], o[8];
    load16_as_float(static_cast<const T*>(p.dout.ptr) + row_offset(p, p.dout, row, h) + 8 * lane, d);
    load16_as_float(static_cast<const T*>(p.out.ptr) + row_offset(p, p.out, row, h) + 8 * lane, o);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += d[i] * o[i];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) args.dsum[h * p.total_q + row] = acc;
}

template <typename T>
__global__ void __launch_bounds__(kPrepostThreads) bwd_dsum_kernel(const __grid_constant__ BwdArgs args) {
  bwd_dsum<T>(args);
}

template <typename T>
__global__ void __launch_bounds__(kPrepostThreads) bwd_dq_convert_kernel(const __grid_constant__ BwdArgs args) {
  const BwdProblem& p = args.p;
  const int64_t chunks = p.head_dim / 8;
  const int64_t idx = int64_t(blockIdx.x) * kPrepostThreads + threadIdx.x;
  if (idx >= p.total_q * p.heads * chunks) return;
  const int64_t c = idx % chunks, pair = idx / chunks;
  const int64_t row = pair / p.heads, h = pair % p.heads;
  const float* src = args.dq_accum + dq_accum_offset(row, h, 8 * c, p.heads, p.head_dim);
  const float4 lo = *reinterpret_cast<const float4*>(src);
  const float4 hi = *reinterpret_cast<const float4*>(src + 4);
  uint4 packed;
  packed.x = ptx::pack2<T>(lo.x, lo.y);
  packed.y = ptx::pack2<T>(lo.z, lo.w);
  packed.z = ptx::pack2<T>(hi.x, hi.y);
  packed.w = ptx::pack2<T>(hi.z, hi.w);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq.ptr) + row_offset(p, p.dq, row, h) + 8 * c) = packed;
}

}  // namespace flashattn::detail::cuda::attn
