#pragma once

// Kernel arguments of the sm90 backward's main kernel: the TMA maps of Q, K, V and dO (built on the host
// per call, tensor_map.h) beside the arguments every backward kernel shares (attn/bwd_args.h: the problem,
// the D and dq_accum workspaces, the key-tile count). Passed by value as a __grid_constant__ kernel
// parameter, which is where TMA reads its maps from.

#include <cuda.h>

#include "cuda/attn/bwd_args.h"

namespace flashattn::detail::cuda::sm90 {

struct BwdArgs {
  CUtensorMap q_map, k_map, v_map, do_map;  // (head dim, rows, heads, batch); 64-byte aligned by their type
  attn::BwdArgs base;                       // base.num_n_blocks: key tiles per (sequence, kv head)
  // dQ through the shared buffers and bulk reductions into dq_accum's tiles (sm90/dq_tiles.h), or (false)
  // each consumer thread's reductions into its blocked layout (attn/dq_accum.h); launch_bwd sizes and
  // lays out dq_accum to match.
  bool dq_bulk = false;
  // The deterministic mode of the bulk dQ (null otherwise): per (dQ tile, head) of dq_accum the count of
  // CTAs whose reductions into its blocks are done, and after them the CTA ticket counter (bwd_kernel.cuh
  // says how the order is kept); zeroed by launch_bwd before each call.
  int* dq_order = nullptr;
};

}  // namespace flashattn::detail::cuda::sm90
