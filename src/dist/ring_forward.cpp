// Ring attention forward: the K/V shards travel around the ring; at each step every rank attends with
// its queries to the block it holds while the block moves on to the next rank.

#include <memory>

#include "dist/forward_merge.h"
#include "dist/ring_setup.h"
#include "flashattn/api.h"
#include "flashattn/dist.h"

namespace flashattn::dist {

void ring_forward(Communicator& comm, const FwdParams& params, const ShardSpec& spec, Stream stream) {
  using namespace detail;
  RingSetup s = prepare_ring(comm, params, spec, nullptr, "flashattn::dist::ring_forward", stream);
  if (s.world == 1) {  // the whole sequence, in order: one plain call (ring_setup.h, localise)
    FwdParams local = params;
    localise(local, s);
    forward(local, stream);
    return;
  }
  DeviceOps& ops = *s.ops;
  ForwardMerger merger(s, stream);

  // Two travelling buffers: at each step one is sent on while the other receives the next block.
  const size_t bytes = kv_block_bytes(s, s.dtype);
  Buffer buffers[2];
  KvBlock blocks[2];
  if (s.world > 1) {
    for (int i = 0; i < 2; ++i) {
      buffers[i] = ops.allocate(bytes, stream);
      blocks[i] = kv_block(s, buffers[i].data(), s.dtype);
    }
    ops.copy(s.k, rows_of(blocks[0].k, 0, s.rows), stream);
    ops.copy(s.v, rows_of(blocks[0].v, 0, s.rows), stream);
  }
  int cur = 0;
  for (int step = 0; step < s.world; ++step) {
    const int source = (s.rank - step + s.world) % s.world;  // whose K/V this rank holds now
    std::unique_ptr<Communicator::Pending> shift;
    if (step + 1 < s.world) shift = comm.start_ring_shift(buffers[cur].data(), buffers[1 - cur].data(), bytes, stream);
    // The rank's own block (step 0) is read in place; later blocks from the travelling buffer.
    const Tensor& k = step == 0 ? s.k : blocks[cur].k;
    const Tensor& v = step == 0 ? s.v : blocks[cur].v;
    merger.attend(params, plan_block_tasks(s.shards[size_t(s.rank)], s.shards[size_t(source)], s.window), k, v, stream);
    if (shift) {
      shift->wait(stream);
      cur = 1 - cur;
    }
  }
  merger.finish(stream);
}

}  // namespace flashattn::dist
