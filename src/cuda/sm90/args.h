#pragma once

// Kernel arguments of the sm90 forward: the TMA maps of Q, K and V (built on the host per call,
// tensor_map.h), the normalised problem, and the constants derived from it once on the host. Passed by
// value as a __grid_constant__ kernel parameter, which is where TMA reads its maps from.

#include <cuda.h>

#include <cstdint>

#include "api/problem.h"
#include "cuda/attn/fast_divmod.h"
#include "cuda/attn/tile_order.h"

namespace flashattn::detail::cuda::sm90 {

struct FwdArgs {
  CUtensorMap q_map, k_map, v_map;  // (head dim, rows, heads, batch); 64-byte aligned by their type
  CUtensorMap o_map;                // out, boxes of one warpgroup's 64 rows (tma_store only)
  FwdProblem p;
  float scale_log2 = 0;    // softmax_scale * log2(e), > 0 (the backend declines other scales)
  int group = 1;           // query heads per kv head
  int num_m_blocks = 0;    // query tiles per (sequence, head)
  bool pingpong = false;   // the consumer warpgroups take turns at their products (fwd_kernel.cuh)
  bool overlap = false;    // S of the next key tile overlaps P V of this one, inside a warpgroup (fwd_kernel.cuh)
  bool tma_store = false;  // the epilogue stores O with TMA (o_map; dense calls only), else with 16-byte stores
  // How far (base-2 logit units) a row's max may grow before the online softmax moves it and rescales O
  // (attn::SoftmaxRow::begin_lazy); 0: on any growth.
  float max_slack = 0;
  int persistent_ctas = 0;  // CTAs of a persistent grid (one per SM); 0: one CTA per work tile (fwd_kernel.cuh)
  // A zeroed word of the call's workspace: the persistent grid draws its work tiles from it (DynamicTiles,
  // fwd_kernel.cuh); null: CTA c takes tiles c, c + grid, ...
  uint32_t* tile_counter = nullptr;
  // The order of the work tiles (attn/tile_order.h): per (sequence, head) by default; masked calls list the
  // heavy query tiles in groups of heads and the light ones last.
  attn::TileOrder order;
  // Paged K/V (p.paged.block_table): k_map / v_map are (head dim, page rows, heads, blocks) with boxes of
  // paged_box_rows rows (fwd_tile.h); 0 when K/V are not paged.
  int paged_box_rows = 0;
  int paged_columns = 0;  // block-table entries a sequence can use: capacity / page_size; 0: an empty pool
  // Paged K/V whose pages are shorter than a key tile: the producer warpgroup copies K/V rows with 16-byte
  // cp.async instead of page-sized TMA boxes (fwd_kernel.cuh, produce_paged_rows); page_div divides key
  // positions by page_size.
  bool paged_rows = false;
  attn::FastDivmod page_div;
};

}  // namespace flashattn::detail::cuda::sm90
