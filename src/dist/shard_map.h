#pragma once

// Where each rank's rows sit in the global sequence(s), as the ring code needs it: per sequence, the
// local rows and their segments. Pure arithmetic on the ShardSpec; no tensors.

#include <cstdint>
#include <vector>

#include "flashattn/dist.h"

namespace flashattn::dist::detail {

// One sequence's part of a shard: `rows` local rows starting at local row `row_base`, made of
// `segments` (whose local_row is relative to row_base).
struct SeqShard {
  int64_t row_base = 0, rows = 0;
  std::vector<Segment> segments;
};

// A rank's shard of every sequence. Dense problems have one SeqShard shared by the whole batch; varlen
// problems have one per packed sequence.
struct RankShard {
  std::vector<SeqShard> seqs;
  int64_t rows = 0;  // local rows in total (the sequence dimension of the local tensors)
};

RankShard rank_shard(const ShardSpec& spec, int world, int rank);

// The whole sequence(s) seen as one shard: every sequence one segment, rows in global order (the layout
// of all-gathered K/V).
RankShard full_shard(const ShardSpec& spec);

}  // namespace flashattn::dist::detail
