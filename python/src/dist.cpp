// The ring planner of flashattn::dist for flashattn.distributed (torch.distributed ring attention): which
// positions each rank holds and which per-block calls (rows, local window) each ring step makes. The
// Python layer only moves tensors and merges; every mask decision is the C++ ring's own
// (src/dist/block_tasks.cpp), so both rings compute the same thing.

#include "flashattn/dist.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"
#include "dist/block_tasks.h"
#include "dist/shard_map.h"
#include "flashattn/error.h"

namespace flashattn::python {

namespace {

using namespace nb::literals;

dist::ShardLayout parse_layout(const std::string& layout) {
  if (layout == "zigzag") return dist::ShardLayout::zigzag;
  if (layout == "contiguous") return dist::ShardLayout::contiguous;
  throw Error(Status::invalid_argument,
              "flashattn.distributed: layout: expected 'zigzag' or 'contiguous', got '" + layout + "'");
}

dist::ShardSpec make_spec(const std::vector<int64_t>& seqlens, bool varlen, const std::string& layout) {
  dist::ShardSpec spec;
  spec.layout = parse_layout(layout);
  if (varlen) {
    spec.varlen_seqlens = seqlens;
  } else {
    if (seqlens.size() != 1)
      throw Error(Status::invalid_argument,
                  "flashattn.distributed: seqlens: expected one global length for a dense problem, got " +
                      std::to_string(seqlens.size()));
    spec.seqlen = seqlens[0];
  }
  return spec;
}

nb::list segments_list(const std::vector<dist::Segment>& segments) {
  nb::list out;
  for (const dist::Segment& s : segments) out.append(nb::make_tuple(s.start, s.length, s.local_row));
  return out;
}

// Everything one rank needs for a ring call: the rows of every rank, its own local cu_seqlens, its segments
// per sequence, and per step t (visiting K/V of rank (rank - t) mod world) the calls to make.
nb::dict ring_plan(const std::vector<int64_t>& seqlens, bool varlen, int world, int rank, const std::string& layout,
                   bool causal, int64_t window_left, int64_t window_right) {
  const dist::ShardSpec spec = make_spec(seqlens, varlen, layout);
  if (!varlen && spec.seqlen < 0)
    throw Error(Status::invalid_argument,
                "flashattn.distributed: seqlen: expected the global sequence length (>= 0), got " +
                    std::to_string(spec.seqlen));
  std::vector<dist::detail::RankShard> shards;
  nb::list rows;
  for (int r = 0; r < world; ++r) {
    shards.push_back(dist::detail::rank_shard(spec, world, r));
    rows.append(shards.back().rows);
  }
  if (rank < 0 || rank >= world)
    throw Error(Status::invalid_argument, "flashattn.distributed: rank: expected in [0, " + std::to_string(world) +
                                              "), got " + std::to_string(rank));
  // The global mask, as the C++ ring forms it (ring_setup.cpp): causal is a right window of 0.
  dist::detail::GlobalWindow window;
  window.left = window_left;
  window.right = causal ? 0 : window_right;

  nb::list steps;
  for (int t = 0; t < world; ++t) {
    const int source = (rank - t + world) % world;
    nb::list tasks;
    for (const dist::detail::BlockTask& b :
         dist::detail::plan_block_tasks(shards[size_t(rank)], shards[size_t(source)], window))
      tasks.append(nb::make_tuple(b.q_row, b.q_rows, b.k_row, b.k_rows, b.window_left, b.window_right));
    steps.append(tasks);
  }
  nb::list cu;
  cu.append(0);
  nb::list segments;
  for (const dist::detail::SeqShard& s : shards[size_t(rank)].seqs) {
    cu.append(s.row_base + s.rows);
    segments.append(segments_list(s.segments));
  }
  nb::dict out;
  out["rows"] = rows;
  out["cu_seqlens"] = cu;
  out["segments"] = segments;
  out["steps"] = steps;
  return out;
}

}  // namespace

void bind_dist(nb::module_& m) {
  m.def(
      "_dist_shard_segments",
      [](int64_t seqlen, int world, int rank, const std::string& layout) {
        return segments_list(dist::shard_segments(seqlen, world, rank, parse_layout(layout)));
      },
      "seqlen"_a, "world"_a, "rank"_a, "layout"_a,
      "flashattn::dist::shard_segments: the (start, length, local_row) runs of one sequence that `rank` holds.");
  m.def("_dist_ring_plan", &ring_plan, "seqlens"_a, "varlen"_a, "world"_a, "rank"_a, "layout"_a, "causal"_a,
        "window_left"_a, "window_right"_a,
        "The ring plan of `rank`: dict rows (per rank), cu_seqlens (this rank's local offsets), segments (per "
        "sequence: (start, length, local_row)), steps (per step t, visiting K/V of rank (rank - t) mod world: "
        "tuples (q_row, q_rows, k_row, k_rows, window_left, window_right) from "
        "flashattn::dist::detail::plan_block_tasks).");
}

}  // namespace flashattn::python
