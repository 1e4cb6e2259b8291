#pragma once

// Tile shapes of the SIMT FlashAttention kernels (cuda_fa1_simt, cuda_fa2_simt). Plain constexpr C++ so
// that host code and tests (which aim at tile boundaries) see the same numbers as the kernels.
//
// A block has kSimtThreads threads. Each query row is owned by `lanes` adjacent lanes of one warp; lane g
// of a row holds the float4 chunks c = g, g + lanes, g + 2 * lanes, ... of the row's q and output
// accumulator in registers. Interleaving the chunks (rather than giving each lane a contiguous slice)
// makes the lanes of a row read consecutive 16-byte words of a shared-memory K/V row: one conflict-free
// wavefront, broadcast to every row of the warp.
//
// lanes grows with the head dim so that a lane holds at most 32 dims of q and 32 of the accumulator
// (64 registers), which keeps head dim 256 free of spills. K and V tiles are fp32 in shared memory;
// `keys` is chosen so a block needs at most 64 KB (three blocks per SM on H100/H200, two on A100).

#include <cstdint>

#include "cuda/attn/head_dim.h"

namespace flashattn::detail::cuda::ladder {

inline constexpr int kSimtThreads = 128;
// Blocks per SM the register allocation must allow (__launch_bounds__): 2 caps a thread at 255
// registers. The kernels need ~170 (q, the accumulator and one chunk of scores in registers); without
// the hint ptxas capped them at 168 and spilled for the buckets with 32 dims per lane.
inline constexpr int kSimtMinBlocks = 2;
// Keys scored per online-softmax step: the chunk's scores live in registers, and the running max and
// the accumulator are rescaled once per chunk instead of once per key.
inline constexpr int kKeyChunk = 16;
// Head dims are compiled in the buckets of attn/head_dim.h.
using attn::head_dim_bucket;
using attn::kMaxHeadDim;

struct SimtTile {
  int head_dim;  // the bucket
  int lanes;     // lanes per query row
  int rows;      // query rows per block
  int keys;      // keys per shared-memory K/V tile

  constexpr int vecs_per_lane() const { return head_dim / 4 / lanes; }
  constexpr int64_t smem_bytes() const { return int64_t(2) * keys * head_dim * int64_t(sizeof(float)); }
};

constexpr SimtTile simt_tile(int bucket) {
  const int lanes = bucket <= 32 ? 1 : bucket <= 64 ? 2 : bucket <= 128 ? 4 : 8;
  return SimtTile{bucket, lanes, kSimtThreads / lanes, bucket <= 128 ? 64 : 32};
}

// What must hold for every bucket: whole float4 chunks per lane, whole key chunks per tile, and rows
// that fill the block exactly.
constexpr bool valid_tile(SimtTile t) {
  return t.head_dim % (4 * t.lanes) == 0 && t.vecs_per_lane() * 4 <= 32 && t.keys % kKeyChunk == 0 &&
         t.rows * t.lanes == kSimtThreads && 32 % t.lanes == 0 && t.smem_bytes() <= 64 * 1024;
}
static_assert(valid_tile(simt_tile(32)) && valid_tile(simt_tile(64)) && valid_tile(simt_tile(96)) &&
              valid_tile(simt_tile(128)) && valid_tile(simt_tile(160)) && valid_tile(simt_tile(192)) &&
              valid_tile(simt_tile(224)) && valid_tile(simt_tile(256)));

}  // namespace flashattn::detail::cuda::ladder
