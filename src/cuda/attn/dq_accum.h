#pragma once

// Row indexing of the backward's fp32 workspaces (dsum, dq_accum) and the blocked layout of dq_accum,
// shared by the backward's main kernels and its pre/post kernels (bwd_prepost.cuh). Plain C++ with FA_HD
// functions so host tests can check the layout.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/score.h"

namespace flashattn::detail::cuda::attn {

// Index of query row i of sequence b among all query rows of the call (b * seqlen_q + i when dense,
// cu_seqlens_q[b] + i when varlen): the row index of the fp32 workspaces of the backward.
FA_HD int64_t global_q_row(const FwdProblem& p, int64_t b, const SeqRange& seq, int64_t i) {
  return (p.cu_seqlens_q ? 0 : b * p.seqlen_q) + seq.q_start + i;
}

// Layout of dq_accum, the fp32 dQ the backward's atomics add into: blocks of 8 query rows x 8 head dims,
// each contiguous and row-major (256 bytes), ordered by (global row / 8, head, dim / 8). Why blocked: the
// MMA accumulator of one warp holds 8 rows x 8 dims per fragment half (lane = 4 * row + dim / 2), so one
// 8-byte atomic per lane covers exactly one block, 256 contiguous bytes. With row-major rows of
// heads * head_dim floats the same instruction touched 8 rows, 8 separate L1 requests, and the atomics
// stalled the load/store queue ("lg throttle": 6-7% of the backward's stall samples, bench/NOTES.md).
// A query tile whose first global row is not a multiple of 8 (varlen) straddles two blocks per fragment
// half: two segments, still contiguous. The buffer holds round_up(total rows, 8) rows.
FA_HD int64_t dq_accum_offset(int64_t row, int64_t h, int64_t dim, int64_t heads, int64_t head_dim) {
  return ((row >> 3) * heads + h) * 8 * head_dim + (dim >> 3) * 64 + (row & 7) * 8 + (dim & 7);
}
FA_HD int64_t dq_accum_elems(int64_t total_rows, int64_t heads, int64_t head_dim) {
  return (total_rows + 7) / 8 * 8 * heads * head_dim;
}

}  // namespace flashattn::detail::cuda::attn
