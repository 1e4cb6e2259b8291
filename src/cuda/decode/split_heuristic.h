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
  int blocks_per_sm = 1;   // resident blocks per SM (occupancy of the kernel)
  bool streaming = false;  // at most one packed row per warp, and a contiguous or large-page compact cache
                           // or the wide shape (below)
  int requested = 0;       // KVCacheProblem::num_splits: > 0 overrides the heuristic
};

// The rule (docs/decode.md):
//  * requested > 0: that many, at most kMaxSplits;
//  * otherwise the most splits that keep one wave of blocks resident (blocks * splits <= SMs * per_sm),
//    limited so that a split reads at least max(block_n, rows) keys (its partial output, rows x head_dim
//    fp32, then costs at most about the K/V it read, and stays in L2 until the combine reads it) and by
//    kMaxSplits; at least 1. per_sm is 1 for `streaming` calls, else blocks_per_sm: a block with one
//    row per warp keeps enough loads in flight alone, and a second one per SM only adds partials to
//    write and merge (batch 1 x 4k: 18.1 us with 16 splits against 19.4 with 33; batch 16 x 4k 75.8 us
//    unsplit against 80.5 with 2), while multi-token blocks (more math per byte) need the second block
//    (16 tokens at batch 16 x 32k: 652 us with 2 splits, 878 with 1). A paged cache counts as
//    streaming when it takes the tile loader's compact path (cache_rows.h) with pages of at least
//    kStreamingMinPageSize rows: page 256 at one block per SM ran as fast as contiguous (batch 16 x 32k
//    480 us against 476; 493 with 2 splits), page 16 and 1 did not (528 and 539 us against 495 and
//    497 with 2 splits): with pages smaller than a tile, one small block per SM does not keep enough
//    distinct pages in flight. Those calls take the wide shape (decode_tile.h: twice the warps, one block
//    per SM by its shared memory), which streams them at one block per SM within 2-4% of contiguous.
//    Measured on the H200 (bench/NOTES.md).
int choose_num_splits(const SplitInputs& in);

// The smallest page size at which a compact paged call counts as streaming (above). Sizes between 16
// and 256 were not measured.
inline constexpr int64_t kStreamingMinPageSize = 256;

}  // namespace flashattn::detail::cuda::decode
