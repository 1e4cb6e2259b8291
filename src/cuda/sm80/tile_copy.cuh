#pragma once

// Global <-> shared copies of (rows x head_dim) tiles in 16-byte chunks. Consecutive threads take
// consecutive chunks of a row, so a warp reads or writes whole rows: 16-byte, coalesced accesses.
// Rows past the sequence and chunks past the real head dim are zero-filled on load (cp.async with
// source size 0) and skipped on store, which is how ragged sequence ends and padded head dims are handled.

#include <cstdint>

#include "cuda/common/ptx.h"

namespace flashattn::detail::cuda::sm80 {

// Calls f(row, chunk) for rows [0, kRows) x chunks [0, Tile::kChunksPerRow) spread over kThreads threads.
template <typename Tile, int kRows, int kThreads, typename F>
__device__ __forceinline__ void for_each_chunk(int tid, F&& f) {
  constexpr int kChunks = Tile::kChunksPerRow;
  if constexpr (kThreads % kChunks == 0) {
    // Every thread keeps one chunk column: the row advances by a constant per step.
    constexpr int kRowsPerStep = kThreads / kChunks;
    static_assert(kRows % kRowsPerStep == 0, "rows must split evenly over the copy steps");
#pragma unroll
    for (int i = 0; i < kRows / kRowsPerStep; ++i) f(tid / kChunks + i * kRowsPerStep, tid % kChunks);
  } else {
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
      const int idx = i * kThreads + tid;
      if (kTotal % kThreads == 0 || idx < kTotal) f(idx / kChunks, idx % kChunks);
    }
  }
}

// Issues cp.async for rows [row0, row0 + kRows) of `tile`; tile row row0 + r comes from
// src + r * row_stride. Rows r >= valid_rows and chunks >= valid_chunks are zero-filled.
template <typename Tile, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_rows_async(T* tile, int row0, const T* src, int64_t row_stride, int valid_rows,
                                                int valid_chunks, int tid) {
  const uint32_t base = ptx::smem_addr(tile);
  for_each_chunk<Tile, kRows, kThreads>(tid, [&](int r, int c) {
    const bool ok = r < valid_rows && c < valid_chunks;
    const T* from = ok ? src + r * row_stride + c * 8 : src;
    ptx::cp_async_16(base + uint32_t(Tile::chunk_offset(row0 + r, c)) * 2u, from, ok);
  });
}

// Stores rows [row0, row0 + kRows) of `tile` to dst + r * row_stride (r < valid_rows, chunks < valid_chunks).
template <typename Tile, int kRows, int kThreads, typename T>
__device__ __forceinline__ void store_rows(T* dst, int64_t row_stride, const T* tile, int row0, int valid_rows,
                                           int valid_chunks, int tid) {
  for_each_chunk<Tile, kRows, kThreads>(tid, [&](int r, int c) {
    if (r < valid_rows && c < valid_chunks)
      *reinterpret_cast<uint4*>(dst + r * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + Tile::chunk_offset(row0 + r, c));
  });
}

// Issues 4-byte cp.async for kCount fp32 values; value i is copied by the thread with index i (callers
// pass tid - first so that two vectors load in parallel); values i >= valid are zero-filled.
template <int kCount>
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int valid, int i) {
  if (i >= 0 && i < kCount) ptx::cp_async_4(ptx::smem_addr(dst + i), i < valid ? src + i : src, i < valid);
}

}  // namespace flashattn::detail::cuda::sm80
