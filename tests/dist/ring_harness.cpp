#include "ring_harness.h"

#include <sstream>
#include <stdexcept>

namespace fa_test {

namespace dist = flashattn::dist;

std::string DistCase::name() const {
  std::ostringstream s;
  s << (mode == DistMode::ring ? "ring" : "allgather") << "_" << dist::layout_name(layout) << "_"
    << (backward ? "bwd" : "fwd") << "_" << cfg.name();
  std::string out = s.str();
  for (char& ch : out)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return out;
}

dist::ShardSpec shard_spec(const DistCase& c) {
  dist::ShardSpec spec;
  spec.layout = c.layout;
  if (c.cfg.varlen()) {
    if (c.cfg.varlen_q != c.cfg.varlen_k) throw std::invalid_argument("DistCase: varlen_q must equal varlen_k");
    spec.varlen_seqlens = c.cfg.varlen_q;
  } else {
    if (c.cfg.seqlen_q != c.cfg.seqlen_k) throw std::invalid_argument("DistCase: seqlen_q must equal seqlen_k");
    spec.seqlen = c.cfg.seqlen_q;
  }
  return spec;
}

HostTensor shard_of(const HostTensor& full, int seq_dim, const dist::ShardSpec& spec, int world, int rank) {
  std::vector<int64_t> shape = full.shape();
  shape[size_t(seq_dim)] = dist::shard_rows(spec, world, rank);
  HostTensor local(full.dtype(), shape);
  local.poison();
  dist::shard_tensor(full.view(), local.view(), seq_dim, spec, world, rank);
  return local;
}

namespace {

HostTensor full_like(const HostTensor& like, DType dtype) {
  HostTensor t(dtype, like.shape());
  t.poison();
  return t;
}

HostTensor gathered(dist::Communicator& comm, const HostTensor& local, const std::vector<int64_t>& full_shape,
                    int seq_dim, const dist::ShardSpec& spec) {
  HostTensor full(local.dtype(), full_shape);
  full.poison();
  dist::gather_tensor(comm, local.view(), full.view(), seq_dim, spec);
  return full;
}

}  // namespace

DistOutputs run_distributed(dist::Communicator& comm, const DistCase& c, const AttnInputs& in,
                            const std::string& backend) {
  const AttnConfig& cfg = c.cfg;
  const dist::ShardSpec spec = shard_spec(c);
  const int world = comm.size(), rank = comm.rank();
  const int rd = rows_dim(cfg), ld = lse_dim(cfg);
  const HostTensor q = shard_of(in.q, rd, spec, world, rank);
  const HostTensor k = shard_of(in.k, rd, spec, world, rank);
  const HostTensor v = shard_of(in.v, rd, spec, world, rank);
  const HostTensor full_lse = cfg.varlen() ? HostTensor(DType::f32, {cfg.heads, in.q.shape()[0]})
                                           : HostTensor(DType::f32, {cfg.batch, cfg.heads, cfg.seqlen_q});
  HostTensor out = full_like(q, cfg.dtype);
  std::vector<int64_t> lse_shape = full_lse.shape();
  lse_shape[size_t(ld)] = dist::shard_rows(spec, world, rank);
  HostTensor lse(DType::f32, lse_shape);
  lse.poison();

  flashattn::FwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
  p.options.softmax_scale = cfg.softmax_scale;
  p.options.causal = cfg.causal;
  p.options.window_left = cfg.window_left;
  p.options.window_right = cfg.window_right;
  p.options.softcap = cfg.softcap;
  p.options.backend = backend;
  p.dropout_p = cfg.dropout_p;
  if (c.mode == DistMode::ring) {
    dist::ring_forward(comm, p, spec);
  } else {
    dist::allgather_forward(comm, p, spec);
  }

  DistOutputs r;
  r.fwd.out = gathered(comm, out, in.q.shape(), rd, spec);
  r.fwd.lse = gathered(comm, lse, full_lse.shape(), ld, spec);
  if (!c.backward) return r;

  const HostTensor dout = shard_of(in.dout, rd, spec, world, rank);
  HostTensor dq = full_like(q, cfg.dtype), dk = full_like(k, cfg.dtype), dv = full_like(v, cfg.dtype);
  flashattn::BwdParams b;
  static_cast<flashattn::FwdParams&>(b) = p;
  b.dout = dout.view();
  b.dq = dq.view();
  b.dk = dk.view();
  b.dv = dv.view();
  dist::ring_backward(comm, b, spec);
  r.bwd.dq = gathered(comm, dq, in.q.shape(), rd, spec);
  r.bwd.dk = gathered(comm, dk, in.k.shape(), rd, spec);
  r.bwd.dv = gathered(comm, dv, in.v.shape(), rd, spec);
  return r;
}

}  // namespace fa_test
