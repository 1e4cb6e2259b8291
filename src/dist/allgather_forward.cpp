// The simple mode: gather every rank's K/V once, then attend with the local queries to the whole
// sequence (one call per query segment: one with the contiguous layout, two with zigzag).

#include <vector>

#include "dist/forward_merge.h"
#include "dist/ring_setup.h"
#include "flashattn/dist.h"

namespace flashattn::dist {

void allgather_forward(Communicator& comm, const FwdParams& params, const ShardSpec& spec, Stream stream) {
  using namespace detail;
  RingSetup s = prepare_ring(comm, params, spec, nullptr, "flashattn::dist::allgather_forward", stream);
  DeviceOps& ops = *s.ops;
  const Device dev = s.q.device;

  // Every rank contributes a block of the same capacity (shards differ by at most a row per segment).
  const size_t bytes = kv_block_bytes(s, s.dtype);
  Buffer send = ops.allocate(bytes, stream);
  const KvBlock mine = kv_block(s, send.data(), s.dtype);
  ops.copy(s.k, rows_of(mine.k, 0, s.rows), stream);
  ops.copy(s.v, rows_of(mine.v, 0, s.rows), stream);
  Buffer gathered = ops.allocate(bytes * size_t(s.world), stream);
  comm.allgather(send.data(), gathered.data(), bytes, stream);

  // Reassemble the sequence(s) in global order: rank r's segment (start, length) of sequence q goes to
  // rows full.row_base + start.
  const RankShard full = full_shard(spec);
  const int esize = dtype_size(s.dtype);
  Buffer full_buf = ops.allocate(2 * size_t(s.nb * full.rows * s.heads_k * s.dim) * size_t(esize), stream);
  const Tensor full_k = contiguous4(full_buf.data(), s.dtype, s.nb, full.rows, s.heads_k, s.dim, dev);
  const Tensor full_v = contiguous4(static_cast<char*>(full_buf.data()) + full_buf.bytes() / 2, s.dtype, s.nb,
                                    full.rows, s.heads_k, s.dim, dev);
  for (int r = 0; r < s.world; ++r) {
    const KvBlock theirs = kv_block(s, static_cast<char*>(gathered.data()) + size_t(r) * bytes, s.dtype);
    const RankShard& shard = s.shards[size_t(r)];
    for (size_t q = 0; q < shard.seqs.size(); ++q) {
      for (const Segment& seg : shard.seqs[q].segments) {
        if (seg.length == 0) continue;
        const int64_t from = shard.seqs[q].row_base + seg.local_row, to = full.seqs[q].row_base + seg.start;
        ops.copy(rows_of(theirs.k, from, seg.length), rows_of(full_k, to, seg.length), stream);
        ops.copy(rows_of(theirs.v, from, seg.length), rows_of(full_v, to, seg.length), stream);
      }
    }
  }

  ForwardMerger merger(s, stream);
  merger.attend(params, plan_block_tasks(s.shards[size_t(s.rank)], full, s.window), full_k, full_v, stream);
  merger.finish(stream);
}

}  // namespace flashattn::dist
