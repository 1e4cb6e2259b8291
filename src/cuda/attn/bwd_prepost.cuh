#pragma once

// The two light kernels around the backward main kernel (templated on the dtype only):
//  * bwd_dsum_kernel: D_i = rowsum(dO * O) in fp32 for every (query row, head), one warp per pair,
//    lane c reading the 16-byte chunk c of the row (head dims <= 256 = 32 chunks); it also zeroes the
//    pair's row of dq_accum (when there is one), which saves a separate memset pass over the workspace;
//  * bwd_dq_convert_kernel: dq = dq_accum times dq_scale (1, or the softmax scale where the main kernel
//    left it out of dS) rounded to the dtype, one thread per 8 elements.
// The 8 dims of a chunk are contiguous in dq_accum's layout: a policy type, by default the blocked layout
// of dq_accum.h (BlockedDqLayout); the sm90 backward's tiles are another (sm90/dq_tiles.h).
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

// dq_accum's layout as a policy: offset(p, row, h, dim) of an 8-dim chunk (32 contiguous bytes), negative
// where the row belongs to no sequence (nothing there to clear or read: dq is 0), and zero_chunks(p), the
// chunks of a row the D kernel clears (columns a layout keeps beyond head_dim are cleared too).
struct BlockedDqLayout {
  __device__ __forceinline__ static int64_t offset(const BwdProblem& p, int64_t row, int64_t h, int64_t dim) {
    return dq_accum_offset(row, h, dim, p.heads, p.head_dim);
  }
  __device__ __forceinline__ static int zero_chunks(const BwdProblem& p) { return int(p.head_dim / 8); }
};

// The body of bwd_dsum_kernel, for entry points of their own (the sm_70 image, sm70/image_entries.cu).
template <typename T, typename DqLayout = BlockedDqLayout>
__device__ __forceinline__ void bwd_dsum(const BwdArgs& args) {
  const BwdProblem& p = args.p;
  const int lane = int(threadIdx.x) & 31;
  const int64_t pair = int64_t(blockIdx.x) * (kPrepostThreads / 32) + threadIdx.x / 32;
  if (pair >= p.total_q * p.heads) return;
  const int64_t row = pair / p.heads, h = pair % p.heads;
  float acc = 0.0f;
  if (args.dq_accum != nullptr && lane < DqLayout::zero_chunks(p)) {
    const int64_t at = DqLayout::offset(p, row, h, 8 * lane);
    if (at >= 0) {
      float4* zero = reinterpret_cast<float4*>(args.dq_accum + at);
      zero[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      zero[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
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

template <typename T, typename DqLayout = BlockedDqLayout>
__global__ void __launch_bounds__(kPrepostThreads) bwd_dsum_kernel(const __grid_constant__ BwdArgs args) {
  bwd_dsum<T, DqLayout>(args);
}

template <typename T, typename DqLayout = BlockedDqLayout>
__global__ void __launch_bounds__(kPrepostThreads) bwd_dq_convert_kernel(const __grid_constant__ BwdArgs args) {
  const BwdProblem& p = args.p;
  const int64_t chunks = p.head_dim / 8;
  const int64_t idx = int64_t(blockIdx.x) * kPrepostThreads + threadIdx.x;
  if (idx >= p.total_q * p.heads * chunks) return;
  const int64_t c = idx % chunks, pair = idx / chunks;
  const int64_t row = pair / p.heads, h = pair % p.heads;
  const int64_t at = DqLayout::offset(p, row, h, 8 * c);
  const float4 none = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float4 lo = at >= 0 ? *reinterpret_cast<const float4*>(args.dq_accum + at) : none;
  const float4 hi = at >= 0 ? *reinterpret_cast<const float4*>(args.dq_accum + at + 4) : none;
  const float k = args.dq_scale;
  uint4 packed;
  packed.x = ptx::pack2<T>(lo.x * k, lo.y * k);
  packed.y = ptx::pack2<T>(lo.z * k, lo.w * k);
  packed.z = ptx::pack2<T>(hi.x * k, hi.y * k);
  packed.w = ptx::pack2<T>(hi.z * k, hi.w * k);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq.ptr) + row_offset(p, p.dq, row, h) + 8 * c) = packed;
}

}  // namespace flashattn::detail::cuda::attn
