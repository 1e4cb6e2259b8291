// Ring attention backward. K/V travel around the ring as in the forward; with each block travels its
// fp32 dK/dV accumulator, to which every rank adds the contribution of its queries. dQ stays home.
//
// Each per-block call is a plain flashattn::backward given the *global* out and softmax_lse of the
// forward: with those, P = exp(S - lse) is the global softmax restricted to the block and
// D = rowsum(dO * O) the global one, so dS = P * (dP - D) is exactly the global gradient's slice and the
// slices simply add up. (A backward that recomputed its softmax from the block alone would get a
// block-local P and D; prepare_ring refuses such a backend.)

#include <memory>

#include "dist/ring_setup.h"
#include "flashattn/api.h"
#include "flashattn/dist.h"

namespace flashattn::dist {

void ring_backward(Communicator& comm, const BwdParams& params, const ShardSpec& spec, Stream stream) {
  using namespace detail;
  RingSetup s = prepare_ring(comm, params, spec, &params, "flashattn::dist::ring_backward", stream);
  if (s.world == 1) {  // the whole sequence, in order: one plain call (ring_setup.h, localise)
    BwdParams local = params;
    localise(local, s);
    backward(local, stream);
    return;
  }
  DeviceOps& ops = *s.ops;
  const Device dev = s.q.device;

  // Travelling K/V (the call's dtype), double-buffered as in the forward.
  const size_t kv_bytes = kv_block_bytes(s, s.dtype);
  Buffer kv_buffers[2];
  KvBlock kv[2];
  if (s.world > 1) {
    for (int i = 0; i < 2; ++i) {
      kv_buffers[i] = ops.allocate(kv_bytes, stream);
      kv[i] = kv_block(s, kv_buffers[i].data(), s.dtype);
    }
    ops.copy(s.k, rows_of(kv[0].k, 0, s.rows), stream);
    ops.copy(s.v, rows_of(kv[0].v, 0, s.rows), stream);
  }
  // Travelling dK/dV accumulators (fp32). A step adds to the one that arrived, then sends it on; the
  // other buffer receives meanwhile. The transfer overlaps the next step's attention calls.
  const size_t dkv_bytes = kv_block_bytes(s, DType::f32);
  Buffer dkv_buffers[2];
  KvBlock dkv[2];
  for (int i = 0; i < (s.world > 1 ? 2 : 1); ++i) {
    dkv_buffers[i] = ops.allocate(dkv_bytes, stream);
    dkv[i] = kv_block(s, dkv_buffers[i].data(), DType::f32);
  }
  ops.fill(dkv[0].k, 0.0f, stream);
  ops.fill(dkv[0].v, 0.0f, stream);

  Buffer dq_acc_buf = ops.allocate(size_t(s.nb * s.rows * s.heads * s.dim) * sizeof(float), stream);
  const Tensor dq_acc = contiguous4(dq_acc_buf.data(), DType::f32, s.nb, s.rows, s.heads, s.dim, dev);
  ops.fill(dq_acc, 0.0f, stream);
  // Scratch of one call's gradients, in the call's dtype (what flashattn::backward writes).
  const int esize = dtype_size(s.dtype);
  Buffer dq_part = ops.allocate(size_t(s.nb * s.rows * s.heads * s.dim) * size_t(esize), stream);
  Buffer dk_part = ops.allocate(size_t(s.nb * s.rows_cap * s.heads_k * s.dim) * size_t(esize), stream);
  Buffer dv_part = ops.allocate(size_t(s.nb * s.rows_cap * s.heads_k * s.dim) * size_t(esize), stream);

  int cur = 0;  // kv[cur]: the block held now
  int acc = 0;  // dkv[acc]: its accumulator (arriving through `arriving` when that is set)
  std::unique_ptr<Communicator::Pending> arriving;
  for (int step = 0; step < s.world; ++step) {
    const int source = (s.rank - step + s.world) % s.world;
    std::unique_ptr<Communicator::Pending> shift;
    if (step + 1 < s.world)
      shift = comm.start_ring_shift(kv_buffers[cur].data(), kv_buffers[1 - cur].data(), kv_bytes, stream);
    const Tensor& k = step == 0 ? s.k : kv[cur].k;
    const Tensor& v = step == 0 ? s.v : kv[cur].v;
    for (const BlockTask& t : plan_block_tasks(s.shards[size_t(s.rank)], s.shards[size_t(source)], s.window)) {
      BwdParams call;
      call.q = rows_of(s.q, t.q_row, t.q_rows);
      call.k = rows_of(k, t.k_row, t.k_rows);
      call.v = rows_of(v, t.k_row, t.k_rows);
      call.out = rows_of(s.out, t.q_row, t.q_rows);
      call.softmax_lse = lse_rows_of(s.lse, t.q_row, t.q_rows);
      call.dout = rows_of(s.dout, t.q_row, t.q_rows);
      call.dq = contiguous4(dq_part.data(), s.dtype, s.nb, t.q_rows, s.heads, s.dim, dev);
      call.dk = contiguous4(dk_part.data(), s.dtype, s.nb, t.k_rows, s.heads_k, s.dim, dev);
      call.dv = contiguous4(dv_part.data(), s.dtype, s.nb, t.k_rows, s.heads_k, s.dim, dev);
      call.options = block_options(params.options, t);
      call.deterministic = params.deterministic;
      backward(call, stream);
      ops.accumulate(rows_of(dq_acc, t.q_row, t.q_rows), call.dq, stream);
      if (arriving) {  // first use of this block's accumulator: it must have arrived
        arriving->wait(stream);
        arriving.reset();
      }
      ops.accumulate(rows_of(dkv[acc].k, t.k_row, t.k_rows), call.dk, stream);
      ops.accumulate(rows_of(dkv[acc].v, t.k_row, t.k_rows), call.dv, stream);
    }
    if (s.world > 1) {
      if (arriving) arriving->wait(stream);  // no call touched this block: forward it unchanged
      // After the last step this sends each accumulator to its home rank.
      arriving = comm.start_ring_shift(dkv_buffers[acc].data(), dkv_buffers[1 - acc].data(), dkv_bytes, stream);
      acc = 1 - acc;
    }
    if (shift) {
      shift->wait(stream);
      cur = 1 - cur;
    }
  }
  if (arriving) arriving->wait(stream);  // dkv[acc] now holds the complete dK/dV of this rank's own block

  ops.convert(dq_acc, s.dq, stream);
  ops.convert(rows_of(dkv[acc].k, 0, s.rows), s.dk, stream);
  ops.convert(rows_of(dkv[acc].v, 0, s.rows), s.dv, stream);
}

}  // namespace flashattn::dist
