#pragma once

// The sm90 backward's dq_accum layout: fp32 dQ in whole query tiles, so that a consumer warpgroup's dQ of
// one step (kDqTileRows query rows x 64 head dims) is one contiguous 16 KB block, added into global
// memory with one bulk reduction (cp.reduce.async.bulk ... add.f32) from a shared-memory copy of the
// same bytes. The shared copy is written from wgmma accumulators, so the layout inside a block is the
// one that makes those 8-byte stores conflict-free; the global layout is the same bytes.
//
//   tile t of a sequence's query rows (rows [64 t, 64 t + 64) of the sequence) and head h:
//     block (tile, h, panel) at ((tile * heads + h) * panels + panel) * 64 * 64 floats, panel = dim / 64;
//   inside a block, row r and column c (c = dim % 64) at 64 r + (c ^ 8 (r % 8)).
// The XOR moves whole 8-column chunks, so each aligned 8-dim chunk of a row stays 32 contiguous bytes (the
// pre/post kernels' 16-byte accesses). Tiles are numbered per call: a dense call's sequence b owns tiles
// [b T, b T + T) with T = ceil(seqlen_q / 64); a varlen call's sequence b starts at tile
// floor((cu_seqlens_q[b] + 64 b) / 64), which leaves every sequence ceil(len / 64) tiles of its own (the
// next start is at least floor((start + len) / 64) + 1 tiles on), so rows past a sequence's end in its
// last tile belong to no other sequence. Plain C++ with FA_HD functions: tests/cpp/test_cuda_sm90.cpp
// checks the layout on the host.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/index_bounds.h"
#include "cuda/sm90/bwd_tile.h"

namespace flashattn::detail::cuda::sm90 {

inline constexpr int kDqTileRows = 64;  // the backward's block_m (bwd_tile.h)
inline constexpr int kDqPanelCols = 64;
inline constexpr int kDqBlockFloats = kDqTileRows * kDqPanelCols;

// Offset inside a (tile, head, panel) block of row r (0..63) and column c (0..63).
FA_HD constexpr int dq_in_block(int r, int c) { return kDqPanelCols * r + (c ^ (8 * (r & 7))); }

// Offset of block (tile, h, panel) for `heads` heads and `bucket` columns (the head-dim bucket: 64 or 128).
FA_HD constexpr int64_t dq_block_offset(int64_t tile, int64_t h, int panel, int64_t heads, int bucket) {
  return ((tile * heads + h) * (bucket / kDqPanelCols) + panel) * int64_t(kDqBlockFloats);
}

// First tile of sequence b: dense calls (cu_seqlens_q null) b * ceil(seqlen_q / 64); varlen calls
// floor((cu_seqlens_q[b] + 64 b) / 64), given q_start = cu_seqlens_q[b].
FA_HD constexpr int64_t dq_first_tile(bool varlen, int64_t b, int64_t seqlen_q, int64_t q_start) {
  return varlen ? (q_start + int64_t(kDqTileRows) * b) / kDqTileRows : b * ((seqlen_q + kDqTileRows - 1) / kDqTileRows);
}

// Tiles a call needs: dense batch * ceil(seqlen_q / 64); varlen at most floor((total_q + 64 batch) / 64) + 1.
FA_HD constexpr int64_t dq_tiles(bool varlen, int64_t batch, int64_t seqlen_q, int64_t total_q) {
  return varlen ? (total_q + int64_t(kDqTileRows) * batch) / kDqTileRows + 1
                : batch * ((seqlen_q + kDqTileRows - 1) / kDqTileRows);
}

// The deterministic mode's counters (sm90/bwd_args.h, dq_order): one per (tile, head), then the CTA ticket
// counter at this index.
FA_HD constexpr int64_t dq_order_ticket(bool varlen, int64_t batch, int64_t seqlen_q, int64_t total_q, int64_t heads) {
  return dq_tiles(varlen, batch, seqlen_q, total_q) * heads;
}

// Offset of row i of sequence b (first tile `first`), head h, dim d.
FA_HD constexpr int64_t dq_offset(int64_t first, int64_t i, int64_t h, int d, int64_t heads, int bucket) {
  return dq_block_offset(first + i / kDqTileRows, h, d / kDqPanelCols, heads, bucket) +
         dq_in_block(int(i % kDqTileRows), d % kDqPanelCols);
}

// The layout as the pre/post kernels' policy (attn/bwd_prepost.cuh): the offset of global query row `row`
// (attn::global_q_row), or -1 where the row lies in no sequence (a varlen call's rows past
// cu_seqlens_q[batch]); the D kernel clears the bucket's columns of each row (the main kernel adds the
// zeros of the columns past head_dim there).
struct TiledDqLayout {
  FA_HD static int64_t offset(const BwdProblem& p, int64_t row, int64_t h, int64_t dim) {
    const int bucket = bwd_bucket(p.head_dim);
    if (p.cu_seqlens_q == nullptr)
      return dq_offset(dq_first_tile(false, row / p.seqlen_q, p.seqlen_q, 0), row % p.seqlen_q, h, int(dim), p.heads,
                       bucket);
    // The last sequence b whose start is at most row (empty sequences before it are passed over); the
    // clamped range then says whether the row is in it, so that any cu_seqlens_q stays inside the buffer.
    int64_t lo = 0, hi = p.batch;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (p.cu_seqlens_q[mid] <= row)
        lo = mid;
      else
        hi = mid;
    }
    // The query span as seq_range computes it (common/score.h), without reading cu_seqlens_k.
    const PackedSpan q = packed_span(p.cu_seqlens_q[lo], p.cu_seqlens_q[lo + 1], p.total_q, p.seqlen_q);
    const int64_t i = row - q.start;
    if (i < 0 || i >= q.len) return -1;
    return dq_offset(dq_first_tile(true, lo, p.seqlen_q, q.start), i, h, int(dim), p.heads, bucket);
  }
  FA_HD static int zero_chunks(const BwdProblem& p) { return bwd_bucket(p.head_dim) / 8; }
};

}  // namespace flashattn::detail::cuda::sm90
