#pragma once

// Plans the attention calls of one ring step: which local query rows attend to which rows of the
// visiting K/V block, and with which (local) window, so that each call reproduces the global mask.

#include <cstdint>
#include <vector>

#include "dist/shard_map.h"

namespace flashattn::dist::detail {

// The global mask: the query at position p sees keys [p - left, p + right]; -1 leaves a side unbounded.
// Causal is right = 0.
struct GlobalWindow {
  int64_t left = -1, right = -1;
};

// One flashattn call: local query rows [q_row, q_row + q_rows) against visiting rows
// [k_row, k_row + k_rows), both counted in the local tensors' sequence dimension (varlen: absolute rows,
// the sequence's row_base included). The window is the call's own (flash-attn semantics, aligned
// bottom-right); every query row of the call sees at least one key.
struct BlockTask {
  size_t seq = 0;  // index of the SeqShard (always 0 for dense problems)
  int64_t q_row = 0, q_rows = 0;
  int64_t k_row = 0, k_rows = 0;
  int64_t window_left = -1, window_right = -1;

  bool full() const { return window_left < 0 && window_right < 0; }
};

// Every query segment of `q` against every key segment of `kv` (sequence by sequence), with rows that see
// nothing trimmed away, pairs that see nothing dropped, and unmasked calls on adjacent rows coalesced.
std::vector<BlockTask> plan_block_tasks(const RankShard& q, const RankShard& kv, GlobalWindow window);

}  // namespace flashattn::dist::detail
