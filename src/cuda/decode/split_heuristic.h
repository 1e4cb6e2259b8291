#pragma once

// How many splits of the key range the decode kernel uses (flash-decoding). Plain host code: it sees
// only what the host knows without reading device memory (shapes, the cache capacity, a scalar
// cache_seqlens), so the choice is the same when a call is captured into a CUDA graph.

#include <cstdint>

namespace flashattn::detail::cuda::decode {

struct SplitInputs {
  int64_t blocks = 0;    // blocks without splitting: batch * heads_k * row tiles
  int64_t max_keys = 0;  // upper bound of the keys one block attends
  int block_n = 64;      // keys per K/V tile of the kernel
  int64_t rows = 1;      // packed query rows of one block (at most the kernel's row tile)
  int sm_count = 1;
  int blocks_per_sm = 1;  // resident blocks per SM (occupancy of the kernel)
  int requested = 0;      // KVCacheProblem::num_splits: > 0 overrides the heuristic
};

// The rule (docs/decode.md):
//  * requested > 0: that many, at most kMaxSplits;
//  * otherwise the most splits that keep every block resident at once (blocks * splits <= SMs *
//    blocks_per_sm: one wave, no tail, and every resident slot streaming K/V), limited so that a split
//    reads at least max(block_n, rows) keys (its partial output, rows x head_dim fp32, then costs at
//    most about the K/V it read, and stays in L2 until the combine reads it) and by kMaxSplits; at
//    least 1. A batch that fills the slots by itself is not split.
int choose_num_splits(const SplitInputs& in);

}  // namespace flashattn::detail::cuda::decode
