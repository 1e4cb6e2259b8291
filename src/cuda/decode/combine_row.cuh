#pragma once

// The split combine of one packed row, done by one warp: out = sum_s exp(lse_s - lse) * out_s with
// lse = log(sum_s exp(lse_s)), where out_s is split s's normalised output and lse_s its natural-log LSE
// (-inf when the split saw no key: weight 0). A row no split saw gets out 0 and LSE +inf.
//
// The combine kernel (combine.cu) runs it behind the attention kernel that wrote the partials, launched
// before that kernel completed (programmatic dependent launch), so it reads them through L2 only
// (ld.global.cg): nothing of a partial may come from an L1 line filled before they were written.
//
// Loads are issued in batches before any of them is used: each is an L2 round trip, and one at a time
// they made the combine ~20 us at batch 1 (bench/NOTES.md). The split LSEs are read once into
// registers (split s = lane + 32 k); each lane accumulates 4 dims (d = 4 lane + 128 k) with float4 loads,
// a warp reading 512 contiguous bytes per split. The first batch of partials (the lane's first 4 dims of
// splits 0..15) is requested together with the LSEs, not after the weights: with up to 16 splits at head
// dims <= 128 a row is one round trip instead of three (bench/NOTES.md).

#include <cuda_runtime.h>

#include <cmath>

#include "api/problem.h"
#include "cuda/common/ptx.h"
#include "cuda/decode/decode_tile.h"

namespace flashattn::detail::cuda::decode {

inline constexpr int kCombineLoadsInFlight = 16;  // partial rows a lane loads before it accumulates them

__device__ __forceinline__ float load_partial(const float* p) { return __ldcg(p); }

__device__ __forceinline__ float4 load_partial4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }

__device__ __forceinline__ float combine_warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float combine_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T>
__device__ __forceinline__ void store_out4(T* dst, float4 v) {
  uint2 packed;
  packed.x = ptx::pack2<T>(v.x, v.y);
  packed.y = ptx::pack2<T>(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) = packed;  // out rows are 16-byte aligned (supports), d % 4 == 0
}

// Combines packed row `row` ((b * Hk + hk) * rows + r) of the partials; `weights` is this warp's
// kMaxSplits floats of shared memory. All 32 lanes call it.
template <typename T>
__device__ __forceinline__ void combine_split_row(const KVCacheProblem& p, const DecodeArgs& a, int64_t row,
                                                  float* weights, int lane) {
  constexpr int kLsePerLane = kMaxSplits / 32;
  const int64_t rows_all = p.batch * p.heads_k * a.rows;  // also the stride between splits, in rows
  const int mr = int(row % a.rows);
  const int64_t hk = (row / a.rows) % p.heads_k, b = row / a.rows / p.heads_k;
  const int64_t i = mr / a.group, h = hk * a.group + mr % a.group;
  T* out = static_cast<T*>(p.out.ptr) + p.out.offset(b, i, h);
  const int dim = int(p.head_dim);
  const int splits = a.num_splits;

  // Batch (d, s0): splits s0.. of dims d..d+3. Loads depend on s alone, not on the split's weight: loads
  // guarded by weight != 0 made the compiler wait for each weight before issuing its load (2 in flight
  // instead of 8, in the SASS). Every split block writes all of its rows (attention_kernel.cuh), so each
  // read is defined.
  const float* part = a.part_out + row * dim;
  auto load_batch = [&](float4(&v)[kCombineLoadsInFlight], int d, int s0) {
#pragma unroll
    for (int k = 0; k < kCombineLoadsInFlight; ++k) {
      const int s = s0 + k;
      v[k] = s < splits && d < dim ? load_partial4(part + s * rows_all * dim + d) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  float4 v[kCombineLoadsInFlight];
  load_batch(v, 4 * lane, 0);

  float lse_s[kLsePerLane];
#pragma unroll
  for (int k = 0; k < kLsePerLane; ++k) {
    const int s = lane + 32 * k;
    lse_s[k] = s < splits ? load_partial(a.part_lse + s * rows_all + row) : -INFINITY;
  }
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kLsePerLane; ++k) m = fmaxf(m, lse_s[k]);
  m = combine_warp_max(m);
  if (m == -INFINITY) {
    for (int d = 4 * lane; d < dim; d += 128) store_out4(out + d, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    if (lane == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, i, h)] = INFINITY;
    return;
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kLsePerLane; ++k) sum += expf(lse_s[k] - m);  // exp(-inf) = 0 past the last split
  const float lse = m + logf(combine_warp_sum(sum));
#pragma unroll
  for (int k = 0; k < kLsePerLane; ++k) {
    const int s = lane + 32 * k;
    if (s < splits) weights[s] = expf(lse_s[k] - lse);
  }
  __syncwarp();

  for (int d = 4 * lane; d < dim; d += 128) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < splits; s0 += kCombineLoadsInFlight) {
      if (d != 4 * lane || s0 != 0) load_batch(v, d, s0);  // the first batch is in flight already
#pragma unroll
      for (int k = 0; k < kCombineLoadsInFlight; ++k) {  // in split order: the same sums on every call
        const int s = s0 + k;
        const float w = s < splits ? weights[s] : 0.0f;
        if (w == 0.0f) continue;  // a split without visible keys, or past the last one
        acc.x += w * v[k].x;
        acc.y += w * v[k].y;
        acc.z += w * v[k].z;
        acc.w += w * v[k].w;
      }
    }
    store_out4(out + d, acc);
  }
  if (lane == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, i, h)] = lse;
  __syncwarp();  // the weights are rewritten by the warp's next row
}

}  // namespace flashattn::detail::cuda::decode
