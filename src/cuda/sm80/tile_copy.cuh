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

// The row steps of the copies below (load_rows_async explains them): thread t copies chunk column
// t % kPanelChunks of each panel in rows t / kPanelChunks + i * kRowStep, i < kSteps.
template <typename Tile, int kRows, int kThreads>
struct RowSteps {
  static constexpr int kPanelChunks = Tile::kPanelChunks;
  static constexpr int kPanels = Tile::kChunksPerRow / kPanelChunks;
  static constexpr int kRowStep = kThreads / kPanelChunks;
  static constexpr int kSteps = (kRows + kRowStep - 1) / kRowStep;  // row steps of kPanels copies each
  static_assert(kThreads % kPanelChunks == 0 && kRowStep % 8 == 0, "a thread's rows must share one swizzle");
  // Byte offset of (row + i kRowStep, chunk + p kPanelChunks) from (row, chunk) in the tile (smem_layout.h).
  static constexpr uint32_t smem_delta(int i, int p) {
    return uint32_t(p * Tile::kPanelElems + i * kRowStep * kPanelChunks * 8) * 2u;
  }
};

// Issues cp.async for rows [0, kRows) of `tile`; tile row r comes from src + r * row_stride. Rows
// r >= valid_rows and chunks >= valid_chunks are zero-filled.
//
// Thread t copies chunk column t % P of every panel (P = Tile::kPanelChunks, 8 or 4) in the rows
// t / P + i * kRowStep, kRowStep = kThreads / P. kRowStep is a multiple of 8, so all of a thread's rows
// have the same swizzle: its shared-memory addresses differ by compile-time constants and its global
// ones by multiples of one runtime stride. A chunk then costs one cp.async plus, once per row step, one
// 64-bit add. Why it matters: deriving each chunk's row, bounds test and address afresh costs 10-14
// integer instructions per chunk: 14% of the D = 128 forward's loop, 31% of the paired D = 256 one
// (SASS, bench/NOTES.md). A warp still reads whole 64- or 128-byte row
// segments. Tiles with every row and chunk valid (all but a sequence's last, when the head dim fills
// its bucket) take the path without predicates.
template <typename Tile, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_rows_async(T* tile, const T* src, int64_t row_stride, int valid_rows,
                                                int valid_chunks, int tid) {
  using Steps = RowSteps<Tile, kRows, kThreads>;
  constexpr int kPanelChunks = Steps::kPanelChunks, kPanels = Steps::kPanels;
  constexpr int kRowStep = Steps::kRowStep, kSteps = Steps::kSteps;
  const int row = tid / kPanelChunks, chunk = tid % kPanelChunks;
  // With fewer rows than one step covers, the threads past the last row have nothing to copy.
  if (kRows % kRowStep != 0 && row >= kRows) return;
  const uint32_t dst = ptx::smem_addr(tile) + uint32_t(Tile::chunk_offset(row, chunk)) * 2u;
  const int64_t step = kRowStep * row_stride;
  const T* from = src + row * row_stride + chunk * 8;
  if (valid_rows >= kRows && valid_chunks >= Tile::kChunksPerRow) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i, from += step)
#pragma unroll
      for (int p = 0; p < kPanels; ++p)
        if (kRows % kRowStep == 0 || row + i * kRowStep < kRows)
          ptx::cp_async_16(dst + Steps::smem_delta(i, p), from + p * kPanelChunks * 8);
  } else {
#pragma unroll
    for (int i = 0; i < kSteps; ++i, from += step) {
      const bool row_ok = row + i * kRowStep < valid_rows;
#pragma unroll
      for (int p = 0; p < kPanels; ++p) {
        const bool ok = row_ok && chunk + p * kPanelChunks < valid_chunks;
        if (kRows % kRowStep == 0 || row + i * kRowStep < kRows)
          ptx::cp_async_16(dst + Steps::smem_delta(i, p), ok ? from + p * kPanelChunks * 8 : src, ok);
      }
    }
  }
}

// load_rows_async for rows without a common stride: tile row r comes from base + row_offset(r) (the rows of
// a paged K/V tile whose page size is not a multiple of the tile, each in its own page). Same
// thread-to-chunk assignment and zero-fill; row_offset(r) is called only for the rows r < valid_rows a
// thread copies, once per row (the kChunksPerRow / kPanels threads of a row each compute it: a
// block-table read that hits L1 after the first).
template <typename Tile, int kRows, int kThreads, typename T, typename RowOffset>
__device__ __forceinline__ void load_scattered_rows_async(T* tile, const T* base, RowOffset&& row_offset,
                                                          int valid_rows, int valid_chunks, int tid) {
  using Steps = RowSteps<Tile, kRows, kThreads>;
  constexpr int kPanelChunks = Steps::kPanelChunks, kPanels = Steps::kPanels;
  constexpr int kRowStep = Steps::kRowStep, kSteps = Steps::kSteps;
  const int row = tid / kPanelChunks, chunk = tid % kPanelChunks;
  if (kRows % kRowStep != 0 && row >= kRows) return;
  const uint32_t dst = ptx::smem_addr(tile) + uint32_t(Tile::chunk_offset(row, chunk)) * 2u;
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int r = row + i * kRowStep;
    if (kRows % kRowStep != 0 && r >= kRows) continue;
    const bool row_ok = r < valid_rows;
    const T* from = row_ok ? base + row_offset(r) + chunk * 8 : base;
#pragma unroll
    for (int p = 0; p < kPanels; ++p) {
      const bool ok = row_ok && chunk + p * kPanelChunks < valid_chunks;
      ptx::cp_async_16(dst + Steps::smem_delta(i, p), ok ? from + p * kPanelChunks * 8 : base, ok);
    }
  }
}

// The same copy set up once and issued in order in row steps (issue_next), so that a kernel can spread one
// tile's copies over the products they overlap (the sm80 forward's V tile at some head dims,
// fwd_mainloop.cuh). Same thread-to-chunk assignment and zero-fill as load_rows_async; kept apart from it
// because routing every caller through this class changed the register allocation of kernels whose
// copies are not spread (SASS of the forward at D = 224 and of five backward buckets), unmeasured.
template <typename Tile, int kRows, int kThreads, typename T>
class RowsCopy {
  using Steps = RowSteps<Tile, kRows, kThreads>;

 public:
  static constexpr int kPanelChunks = Steps::kPanelChunks;
  static constexpr int kPanels = Steps::kPanels;
  static constexpr int kRowStep = Steps::kRowStep;
  static constexpr int kSteps = Steps::kSteps;  // row steps of kPanels copies each

  __device__ __forceinline__ RowsCopy(T* tile, const T* src, int64_t row_stride, int valid_rows, int valid_chunks,
                                      int tid)
      : src_(src),
        from_(src + (tid / kPanelChunks) * row_stride + (tid % kPanelChunks) * 8),
        step_(kRowStep * row_stride),
        dst_(ptx::smem_addr(tile) + uint32_t(Tile::chunk_offset(tid / kPanelChunks, tid % kPanelChunks)) * 2u),
        row_(tid / kPanelChunks),
        chunk_(tid % kPanelChunks),
        valid_rows_(valid_rows),
        valid_chunks_(valid_chunks) {}

  // Issues the next kCount row steps (the kernels call it from unrolled loops, so `next_` is a constant
  // at every call and the offsets below fold into the cp.async immediates).
  template <int kCount>
  __device__ __forceinline__ void issue_next() {
    const int first = next_;
    next_ += kCount;
    // With fewer rows than one step covers, the threads past the last row have nothing to copy.
    if (kRows % kRowStep != 0 && row_ >= kRows) return;
    const T* from = from_;
    if (valid_rows_ >= kRows && valid_chunks_ >= Tile::kChunksPerRow) {
#pragma unroll
      for (int j = 0; j < kCount; ++j, from += step_) {
        const int i = first + j;
#pragma unroll
        for (int p = 0; p < kPanels; ++p)
          if (i < kSteps && (kRows % kRowStep == 0 || row_ + i * kRowStep < kRows))
            ptx::cp_async_16(dst_ + Steps::smem_delta(i, p), from + p * kPanelChunks * 8);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kCount; ++j, from += step_) {
        const int i = first + j;
        const bool row_ok = row_ + i * kRowStep < valid_rows_;
#pragma unroll
        for (int p = 0; p < kPanels; ++p) {
          const bool ok = row_ok && chunk_ + p * kPanelChunks < valid_chunks_;
          if (i < kSteps && (kRows % kRowStep == 0 || row_ + i * kRowStep < kRows))
            ptx::cp_async_16(dst_ + Steps::smem_delta(i, p), ok ? from + p * kPanelChunks * 8 : src_, ok);
        }
      }
    }
    from_ = from;
  }

 private:
  const T* src_;
  const T* from_;
  int64_t step_;
  uint32_t dst_;
  int row_, chunk_, valid_rows_, valid_chunks_;
  int next_ = 0;
};

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
