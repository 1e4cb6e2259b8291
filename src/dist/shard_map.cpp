#include "dist/shard_map.h"

#include <string>

#include "flashattn/error.h"

namespace flashattn::dist {

namespace {

void check_rank(const char* fn, int world, int rank) {
  if (world < 1)
    throw Error(Status::invalid_argument, std::string(fn) + ": world: expected >= 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world)
    throw Error(Status::invalid_argument, std::string(fn) + ": rank: expected in [0, " + std::to_string(world) +
                                              "), got " + std::to_string(rank));
}

// Chunk c of `chunks` near-equal chunks of [0, seqlen): the first seqlen % chunks are one longer.
Segment chunk(int64_t seqlen, int64_t chunks, int64_t c) {
  const int64_t base = seqlen / chunks, extra = seqlen % chunks;
  return Segment{c * base + (c < extra ? c : extra), base + (c < extra ? 1 : 0), 0};
}

}  // namespace

const char* layout_name(ShardLayout layout) { return layout == ShardLayout::zigzag ? "zigzag" : "contiguous"; }

std::vector<Segment> shard_segments(int64_t seqlen, int world, int rank, ShardLayout layout) {
  check_rank("flashattn::dist::shard_segments", world, rank);
  if (seqlen < 0)
    throw Error(Status::invalid_argument,
                "flashattn::dist::shard_segments: seqlen: expected >= 0, got " + std::to_string(seqlen));
  if (layout == ShardLayout::contiguous) return {chunk(seqlen, world, rank)};
  Segment first = chunk(seqlen, 2 * int64_t(world), rank);
  Segment second = chunk(seqlen, 2 * int64_t(world), 2 * int64_t(world) - 1 - rank);
  second.local_row = first.length;
  return {first, second};
}

int64_t shard_length(int64_t seqlen, int world, int rank, ShardLayout layout) {
  int64_t rows = 0;
  for (const Segment& s : shard_segments(seqlen, world, rank, layout)) rows += s.length;
  return rows;
}

int64_t shard_rows(const ShardSpec& spec, int world, int rank) { return detail::rank_shard(spec, world, rank).rows; }

std::vector<int32_t> shard_cu_seqlens(const ShardSpec& spec, int world, int rank) {
  const detail::RankShard shard = detail::rank_shard(spec, world, rank);
  std::vector<int32_t> cu{0};
  for (const detail::SeqShard& s : shard.seqs) cu.push_back(int32_t(s.row_base + s.rows));
  return cu;
}

namespace detail {

RankShard rank_shard(const ShardSpec& spec, int world, int rank) {
  RankShard shard;
  const std::vector<int64_t> lengths = spec.varlen() ? spec.varlen_seqlens : std::vector<int64_t>{spec.seqlen};
  for (int64_t length : lengths) {
    SeqShard s;
    s.row_base = shard.rows;
    s.segments = shard_segments(length, world, rank, spec.layout);
    for (const Segment& seg : s.segments) s.rows += seg.length;
    shard.rows += s.rows;
    shard.seqs.push_back(std::move(s));
  }
  return shard;
}

RankShard full_shard(const ShardSpec& spec) {
  RankShard shard;
  const std::vector<int64_t> lengths = spec.varlen() ? spec.varlen_seqlens : std::vector<int64_t>{spec.seqlen};
  for (int64_t length : lengths) {
    shard.seqs.push_back(SeqShard{shard.rows, length, {Segment{0, length, 0}}});
    shard.rows += length;
  }
  return shard;
}

}  // namespace detail
}  // namespace flashattn::dist
