#pragma once

// Kernel arguments of the backward: the normalised problem plus the constants derived from it once on
// the host, passed by value as a __grid_constant__ kernel parameter. The pre/post kernels
// (bwd_prepost.cuh) read the problem and the workspaces; the main kernels also the tile counts and order.

#include <cstdint>

#include "api/problem.h"
#include "cuda/attn/dq_accum.h"
#include "cuda/attn/score_args.h"
#include "cuda/attn/tile_order.h"

namespace flashattn::detail::cuda::attn {

struct BwdArgs {
  BwdProblem p;
  ScoreArgs s;
  float* dsum = nullptr;      // D_i = rowsum(dO * O), fp32 at [h * total_q + global row]
  float* dq_accum = nullptr;  // fp32 dQ at dq_accum_offset(global row, h, d); nullptr: deterministic
  float dq_scale = 1.0f;      // the convert kernel's factor: the scale a main kernel left out of dS
  int num_n_blocks = 0;       // key tiles per (sequence, kv head) of the main kernel (launch_bwd)
  int num_m_blocks = 0;       // query tiles per (sequence, head) of the deterministic dQ kernel
  // The tiled kernel's key tiles in the order of tile_order.h, with query tile m standing for key tile
  // num_n_blocks - 1 - m (under a causal mask the lowest key tiles see the most query rows: the heaviest
  // first). Set by launch_bwd; default: per (sequence, kv head).
  TileOrder order;
};

}  // namespace flashattn::detail::cuda::attn
