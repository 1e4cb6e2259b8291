// Host copies between a full tensor and the shards of it that ranks hold (shard, unshard, gather).

#include <algorithm>
#include <string>
#include <vector>

#include "dist/device_ops.h"
#include "dist/shard_map.h"
#include "flashattn/dist.h"
#include "flashattn/error.h"

namespace flashattn::dist {

namespace {

using detail::RankShard;

[[noreturn]] void fail(const char* fn, const std::string& arg, const std::string& expected, const std::string& got) {
  throw Error(Status::invalid_argument, std::string(fn) + ": " + arg + ": expected " + expected + ", got " + got);
}

// `local` must be rank `rank`'s shard of `full` along seq_dim: same dtype, dims and other sizes, host
// memory, contiguous last dim.
void check_pair(const char* fn, const Tensor& full, const Tensor& local, int seq_dim, const RankShard& shard,
                const RankShard& whole) {
  for (const auto& [t, name] : {std::pair{&full, "full"}, std::pair{&local, "local"}}) {
    if (!t->present()) fail(fn, name, "a tensor", "none");
    if (t->device.type != DeviceType::cpu) fail(fn, name, "a CPU tensor", t->describe());
    if (t->shape[t->ndim - 1] > 1 && t->stride[t->ndim - 1] != 1)
      fail(fn, name, "a contiguous last dim", t->describe());
  }
  if (seq_dim < 0 || seq_dim >= full.ndim)
    fail(fn, "seq_dim", "a dimension of full (0.." + std::to_string(full.ndim - 1) + ")", std::to_string(seq_dim));
  if (local.dtype != full.dtype || local.ndim != full.ndim)
    fail(fn, "local", "dtype and dims of full (" + full.describe() + ")", local.describe());
  for (int d = 0; d < full.ndim; ++d)
    if (d != seq_dim && local.shape[d] != full.shape[d])
      fail(fn, "local", "the sizes of full (" + full.describe() + ") outside dim " + std::to_string(seq_dim),
           local.describe());
  if (full.shape[seq_dim] != whole.rows)
    fail(fn, "full", std::to_string(whole.rows) + " rows in dim " + std::to_string(seq_dim) + " (the spec's)",
         full.describe());
  if (local.shape[seq_dim] != shard.rows)
    fail(fn, "local", std::to_string(shard.rows) + " rows in dim " + std::to_string(seq_dim) + " (the rank's shard)",
         local.describe());
}

Tensor slab(const Tensor& t, int seq_dim, int64_t row, int64_t rows) {
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + row * t.stride[seq_dim] * dtype_size(t.dtype);
  v.shape[seq_dim] = rows;
  return v;
}

// Copies each segment between the shard and the full tensor, in the direction `to_local` says.
void copy_segments(const Tensor& full, const Tensor& local, int seq_dim, const RankShard& shard, const RankShard& whole,
                   bool to_local) {
  detail::DeviceOps& ops = detail::device_ops(Device::cpu());
  for (size_t q = 0; q < shard.seqs.size(); ++q) {
    for (const Segment& seg : shard.seqs[q].segments) {
      if (seg.length == 0) continue;
      const Tensor f = slab(full, seq_dim, whole.seqs[q].row_base + seg.start, seg.length);
      const Tensor l = slab(local, seq_dim, shard.seqs[q].row_base + seg.local_row, seg.length);
      if (to_local) {
        ops.copy(f, l, nullptr);
      } else {
        ops.copy(l, f, nullptr);
      }
    }
  }
}

}  // namespace

void shard_tensor(const Tensor& full, const Tensor& local, int seq_dim, const ShardSpec& spec, int world, int rank) {
  const RankShard shard = detail::rank_shard(spec, world, rank), whole = detail::full_shard(spec);
  check_pair("flashattn::dist::shard_tensor", full, local, seq_dim, shard, whole);
  copy_segments(full, local, seq_dim, shard, whole, true);
}

void unshard_tensor(const Tensor& local, const Tensor& full, int seq_dim, const ShardSpec& spec, int world, int rank) {
  const RankShard shard = detail::rank_shard(spec, world, rank), whole = detail::full_shard(spec);
  check_pair("flashattn::dist::unshard_tensor", full, local, seq_dim, shard, whole);
  copy_segments(full, local, seq_dim, shard, whole, false);
}

void gather_tensor(Communicator& comm, const Tensor& local, const Tensor& full, int seq_dim, const ShardSpec& spec) {
  const int world = comm.size(), rank = comm.rank();
  const RankShard shard = detail::rank_shard(spec, world, rank), whole = detail::full_shard(spec);
  check_pair("flashattn::dist::gather_tensor", full, local, seq_dim, shard, whole);
  if (comm.device().type != DeviceType::cpu)
    fail("flashattn::dist::gather_tensor", "comm", "a communicator of host buffers", device_name(comm.device()));
  int64_t cap = 0;
  for (int r = 0; r < world; ++r) cap = std::max(cap, shard_rows(spec, world, r));

  // Every rank sends a contiguous block of `cap` rows (the shards differ in length by a few rows).
  auto packed_shape = [&](void* data) {
    Tensor t = local;
    t.data = data;
    t.shape[seq_dim] = cap;
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.stride[d] = stride;
      stride *= t.shape[d];
    }
    return t;
  };
  detail::DeviceOps& ops = detail::device_ops(Device::cpu());
  const size_t bytes = size_t(packed_shape(nullptr).numel()) * size_t(dtype_size(local.dtype));
  detail::Buffer send = ops.allocate(bytes, nullptr), recv = ops.allocate(bytes * size_t(world), nullptr);
  ops.copy(local, slab(packed_shape(send.data()), seq_dim, 0, shard.rows), nullptr);
  comm.allgather(send.data(), recv.data(), bytes, nullptr);
  for (int r = 0; r < world; ++r) {
    const Tensor theirs =
        slab(packed_shape(static_cast<char*>(recv.data()) + size_t(r) * bytes), seq_dim, 0, shard_rows(spec, world, r));
    copy_segments(full, theirs, seq_dim, detail::rank_shard(spec, world, r), whole, false);
  }
}

}  // namespace flashattn::dist
