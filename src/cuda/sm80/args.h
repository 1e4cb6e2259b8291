#pragma once

// Kernel arguments of the sm80 kernels: the normalised problem plus the constants derived from it once
// on the host (no magic numbers or per-thread recomputation on the device). Passed by value as a
// __grid_constant__ kernel parameter. Plain C++: built by launch_*.cu, read by the kernels.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/score.h"
#include "cuda/attn/bwd_args.h"
#include "cuda/attn/fast_divmod.h"
#include "cuda/attn/score_args.h"
#include "cuda/attn/tile_order.h"
#include "cuda/sm80/debug.h"

namespace flashattn::detail::cuda::sm80 {

// The sm80 kernels are built on the shared attention pieces (src/cuda/attn/).
using namespace attn;

struct FwdArgs {
  FwdProblem p;
  ScoreArgs s;
  int num_m_blocks = 0;     // query tiles per (sequence, head), from seqlen_q (max_seqlen_q when varlen)
  int num_tiles = 0;        // num_m_blocks * heads * batch: the work tiles of the grid (fwd_kernel.cuh)
  bool persistent = false;  // every tile costs the same: the grid may be smaller than the tile list
  bool general = true;      // the general instance (kernel_traits.h, fwd_general), chosen on the host
  TileOrder order;          // the order of the tile list (attn/tile_order.h, launch_fwd); default: per head
  // Paged K/V (p.paged_kv(), attn/paged_keys.h): division by the page size, and whether every key tile lies
  // in one page (page_size a multiple of the instance's block_n), set by run_fwd_instance.
  FastDivmod page;
  bool page_tiles = false;
#if defined(FLASHATTN_SM80_TRACE)
  FwdCtaTrace* trace = nullptr;  // one per CTA (debug.h)
#endif
};

}  // namespace flashattn::detail::cuda::sm80
