#pragma once

// Global -> shared copies of the sm70 kernels' row tiles. sm_70 has no cp.async: plain 16-byte vector
// loads and stores, which the caller's barrier orders.

#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::detail::cuda::sm70 {

// Rows [0, rows) of a tile from global memory, row r at row_at(r) (rows a stride apart, or a KV cache's
// pages), 16-byte chunks; chunks past d_chunks (head_dim / 8) and rows past `rows` are written as zeros,
// so the products need no bounds.
template <int kTileRows, int kHeadDim, int kPitch, int kThreads, typename RowAt>
__device__ __forceinline__ void load_tile_rows_at(__half* tile, RowAt&& row_at, int rows, int d_chunks, int tid) {
  constexpr int kChunks = kHeadDim / 8;
#pragma unroll 4
  for (int c = tid; c < kTileRows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows && ch < d_chunks) v = *reinterpret_cast<const uint4*>(row_at(r) + ch * 8);
    *reinterpret_cast<uint4*>(tile + r * kPitch + ch * 8) = v;
  }
}

// load_tile_rows_at for rows `row_stride` elements apart from `src`.
template <int kTileRows, int kHeadDim, int kPitch, int kThreads>
__device__ __forceinline__ void load_tile_rows(__half* tile, const __half* src, int64_t row_stride, int rows,
                                               int d_chunks, int tid) {
  load_tile_rows_at<kTileRows, kHeadDim, kPitch, kThreads>(
      tile, [&](int r) { return src + r * row_stride; }, rows, d_chunks, tid);
}

}  // namespace flashattn::detail::cuda::sm70
