#pragma once

// The head-dim padding copies' kernels (head_dim_pad_cuda.cu): the caller's (batches, rows, heads, dim)
// region to a dense padded copy and back, as raw bits of the element size (T = uint16_t or uint32_t).
// Also entries of cuda_sm70's sm_70 image (cuda/sm70/image_entries.cu), which a Volta GPU runs instead.

#include <cstdint>

namespace flashattn::detail {

// Strides of the caller's (batches, rows, heads, dim) region; element (b, r, h, d) of the dense padded copy
// is at ((b * rows + r) * heads + h) * padded + d.
struct RegionShape {
  int64_t batch_stride, row_stride, head_stride;
  int64_t rows, heads;
  int64_t dim, padded;
};

__device__ __forceinline__ int64_t caller_row(const RegionShape& s, int64_t dense_row) {
  const int64_t h = dense_row % s.heads, br = dense_row / s.heads;
  return (br / s.rows) * s.batch_stride + (br % s.rows) * s.row_stride + h * s.head_stride;
}

// Thread per element of the padded copy: the caller's value in columns [0, dim), 0 in [dim, padded).
template <typename T>
__device__ __forceinline__ void pad_elements(const T* __restrict__ src, T* __restrict__ dst, RegionShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % s.padded, row = i / s.padded;
    dst[i] = d < s.dim ? src[caller_row(s, row) + d] : T(0);
  }
}

// Thread per element of the caller's region: columns [0, dim) of the padded copy back.
template <typename T>
__device__ __forceinline__ void unpad_elements(const T* __restrict__ src, T* __restrict__ dst, RegionShape s,
                                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % s.dim, row = i / s.dim;
    dst[caller_row(s, row) + d] = src[row * s.padded + d];
  }
}

}  // namespace flashattn::detail
