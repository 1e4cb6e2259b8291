#pragma once

// The order of a grid's work tiles (the forward's; the sm80 backward reuses it, sm80/launch_bwd.cu): which (query
// tile, (sequence, head)) the grid's tile number t runs. The hardware hands CTAs to SMs in blockIdx order
// as slots free (CTA traces confirm it: start times rise with the index), so on a masked call (causal,
// windows), whose tiles differ in cost, the order decides how long the last SMs run alone.
//
// Per (sequence, head), heavy query tiles first (the order of unmasked and varlen calls), a causal grid
// ends with all the query tiles of its last heads, heavy ones among them: CTA traces of the D = 256 and
// D = 128 causal forwards on the H200 show 7.3-10.6% of the SM time idle after each SM's last CTA, and the
// running CTAs below 90% of the peak over the last 14-17% of the kernel (bench/NOTES.md).
// A masked call's list is therefore
//   1. the heavy query tiles (m >= light_m) in groups of heads, each group heaviest query tile first, head
//      fastest: the tiles of one head that run at once start together and read K and V in step (L2
//      hits), and a group holds about as many heads as keep their K and V within half the L2 cache;
//      groups of equal size (a last group of a few heads would end the list with its heavy tiles);
//   2. the light query tiles (m < light_m) of every head, heaviest first: about two waves of the
//      cheapest tiles, which the SMs share out as they free (longest processing time first).
// Measured: idle SM time 0.5-2.0%, causal forward 1.004-1.137x the per-head order.
// Plain C++ with FA_HD functions: tests/cpp/test_cuda_sm80.cpp checks that the order is a permutation.

#include <algorithm>
#include <cstdint>

#include "common/host_device.h"

namespace flashattn::detail::cuda::attn {

struct TileCoord {
  int m_block = 0;   // query tile in its sequence
  int head_seq = 0;  // sequence * heads + head
};

// The defaults are the per-head order.
struct TileOrder {
  int m_blocks = 1;   // query tiles per (sequence, head)
  int head_seqs = 1;  // sequences x heads
  int group = 1;      // heads per group of the heavy part: `extra` groups of group + 1 first, then of group
  int extra = 0;
  int light_m = 0;  // query tiles m < light_m of every head form the tail of the list

  FA_HD bool per_head() const { return group == 1 && extra == 0 && light_m == 0; }
};

// Tile t of the list (m_blocks * head_seqs tiles, < 2^31).
FA_HD TileCoord tile_coord(int t, const TileOrder& o) {
  const int heavy_m = o.m_blocks - o.light_m;
  const int heavy_tiles = heavy_m * o.head_seqs;
  if (t >= heavy_tiles) {
    const int u = t - heavy_tiles;
    return TileCoord{o.light_m - 1 - u / o.head_seqs, u % o.head_seqs};
  }
  const int wide = o.group + 1, wide_tiles = o.extra * wide * heavy_m;
  int first, width, u;
  if (t < wide_tiles) {
    const int g = t / (wide * heavy_m);
    first = g * wide, width = wide, u = t - g * wide * heavy_m;
  } else {
    const int v = t - wide_tiles, g = v / (o.group * heavy_m);
    first = o.extra * wide + g * o.group, width = o.group, u = v - g * o.group * heavy_m;
  }
  return TileCoord{o.m_blocks - 1 - u / width, first + u % width};
}

// The order of a masked call (the forward's query tiles; the backward's key tiles, launch_bwd.cu).
// kv_bytes_per_head: what the tiles of one KV head share in L2 (the forward: its K and V, seqlen_k *
// head_dim * 2 * element size); ratio: query heads per KV head; l2_bytes: the device's L2; slots: CTAs
// the device runs at once. Tile costs are modelled as causal with seqlen_q = seqlen_k: query tile m
// visits m + 1 key tiles, plus 1.5 for its start and end (the CTA traces: 4.8 us fixed and 3.3 us per
// key tile at D = 256).
inline TileOrder masked_tile_order(int m_blocks, int head_seqs, int64_t kv_bytes_per_head, int64_t ratio,
                                   int64_t l2_bytes, int64_t slots) {
  TileOrder o;
  o.m_blocks = m_blocks, o.head_seqs = head_seqs;
  constexpr double kFixed = 1.5;
  const double tail_work = 2.0 * double(slots) * ((m_blocks + 1) / 2.0 + kFixed);
  double work = 0;
  while (o.light_m < m_blocks - 1 && work + (o.light_m + 1 + kFixed) * head_seqs <= tail_work)
    work += (o.light_m++ + 1 + kFixed) * head_seqs;
  const int64_t kv_heads = kv_bytes_per_head > 0 ? l2_bytes / 2 / kv_bytes_per_head : head_seqs;
  const int64_t fit = std::min<int64_t>((kv_heads > 1 ? kv_heads : 1) * ratio, head_seqs);
  const int64_t groups = (head_seqs + fit - 1) / fit;
  o.group = int(head_seqs / groups), o.extra = int(head_seqs % groups);
  return o;
}

}  // namespace flashattn::detail::cuda::attn
