#pragma once

// Kernel arguments of the sm80 kernels: the normalised problem plus the constants derived from it once
// on the host (no magic numbers or per-thread recomputation on the device). Passed by value as a
// __grid_constant__ kernel parameter. Plain C++: built by launch_*.cu, read by the kernels.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/score.h"
#include "cuda/sm80/tile_order.h"

namespace flashattn::detail::cuda::sm80 {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// What the forward and the backward kernels share.
struct ScoreArgs {
  float scale_log2 = 0;  // softmax_scale * log2(e): logits are handled in base 2 (exp2 is one SFU op)
  bool dropout = false;
  uint32_t drop_threshold = 0;  // drop when the Philox word < this (common/philox.h)
  float keep_scale = 1;         // 1 / (1 - p)
  int group = 1;                // query heads per kv head
};

#if defined(FLASHATTN_SM80_TRACE)
// Trace builds only (docs/kernels.md, "Tracing the forward's CTAs"): when and where each CTA ran.
struct FwdCtaTrace {
  uint32_t smid = 0;
  int m_block = 0;                    // the query tile of the CTA's last work tile
  uint64_t start_ns = 0, end_ns = 0;  // %globaltimer at the CTA's start and after its last store
};
#endif

struct FwdArgs {
  FwdProblem p;
  ScoreArgs s;
  int num_m_blocks = 0;     // query tiles per (sequence, head), from seqlen_q (max_seqlen_q when varlen)
  int num_tiles = 0;        // num_m_blocks * heads * batch: the work tiles of the grid (fwd_kernel.cuh)
  bool persistent = false;  // every tile costs the same: the grid may be smaller than the tile list
  bool general = true;      // the general instance (kernel_traits.h, fwd_general), chosen on the host
  TileOrder order;          // the order of the tile list (tile_order.h, launch_fwd); default: per head
#if defined(FLASHATTN_SM80_TRACE)
  FwdCtaTrace* trace = nullptr;  // one per CTA
#endif
};

struct BwdArgs {
  BwdProblem p;
  ScoreArgs s;
  float* dsum = nullptr;      // D_i = rowsum(dO * O), fp32 at [h * total_q + global row]
  float* dq_accum = nullptr;  // fp32 dQ at dq_accum_offset(global row, h, d); nullptr: deterministic
  int num_n_blocks = 0;       // key tiles per (sequence, kv head) of the main kernel (launch_bwd)
  int num_m_blocks = 0;       // query tiles per (sequence, head) of the deterministic dQ kernel
  // The tiled kernel's key tiles in the order of tile_order.h, with query tile m standing for key tile
  // num_n_blocks - 1 - m (under a causal mask the lowest key tiles see the most query rows: the heaviest
  // first). Set by launch_bwd; default: per (sequence, kv head).
  TileOrder order;
};

// Each kernel is compiled twice: a general instance and one without dropout, softcap and ALiBi
// (kGeneral = false), whose element-wise code is a scale, a mask compare and exp2. Most training calls
// use none of the three, and the general code's registers and instructions cost the feature-free call
// up to half its time (bench/NOTES.md, sm80 v3). Chosen on the host, per call.
inline bool needs_general_kernel(const FwdProblem& p) {
  return p.dropout.p > 0.0f || p.score.softcap != 0.0f || p.score.alibi_slopes != nullptr;
}
// The feature-free forward also folds the scale into exp2's argument after taking the row maximum of
// the raw dot products, which is only the maximum of the logits when the scale is positive.
inline bool needs_general_fwd(const FwdProblem& p) {
  return needs_general_kernel(p) || !(p.score.softmax_scale > 0.0f);
}

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
// stalled the load/store queue ("lg throttle": 6-7% of the backward's stall samples, bench/NOTES.md v8).
// A query tile whose first global row is not a multiple of 8 (varlen) straddles two blocks per fragment
// half: two segments, still contiguous. The buffer holds round_up(total rows, 8) rows.
FA_HD int64_t dq_accum_offset(int64_t row, int64_t h, int64_t dim, int64_t heads, int64_t head_dim) {
  return ((row >> 3) * heads + h) * 8 * head_dim + (dim >> 3) * 64 + (row & 7) * 8 + (dim & 7);
}
FA_HD int64_t dq_accum_elems(int64_t total_rows, int64_t heads, int64_t head_dim) {
  return (total_rows + 7) / 8 * 8 * heads * head_dim;
}

}  // namespace flashattn::detail::cuda::sm80
