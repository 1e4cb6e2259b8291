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

DistOutputs run_distributed(const DistRun& run, const DistCase& c, const AttnInputs& in, const std::string& backend) {
  dist::Communicator& comm = run.comm;
  dist::Communicator& host_comm = run.host_comm ? *run.host_comm : comm;
  const Device dev = comm.device();
  const AttnConfig& cfg = c.cfg;
  const dist::ShardSpec spec = shard_spec(c);
  const int world = comm.size(), rank = comm.rank();
  const int rd = rows_dim(cfg), ld = lse_dim(cfg);
  const HostTensor q = shard_of(in.q, rd, spec, world, rank);
  const HostTensor k = shard_of(in.k, rd, spec, world, rank);
  const HostTensor v = shard_of(in.v, rd, spec, world, rank);
  const HostTensor full_lse = cfg.varlen() ? HostTensor(DType::f32, {cfg.heads, in.q.shape()[0]})
                                           : HostTensor(DType::f32, {cfg.batch, cfg.heads, cfg.seqlen_q});
  std::vector<int64_t> lse_shape = full_lse.shape();
  lse_shape[size_t(ld)] = dist::shard_rows(spec, world, rank);
  HostTensor lse(DType::f32, lse_shape);
  lse.poison();
  const DeviceTensor d_q(q, dev), d_k(k, dev), d_v(v, dev), d_out(full_like(q, cfg.dtype), dev), d_lse(lse, dev);

  flashattn::FwdParams p;
  p.q = d_q.view();
  p.k = d_k.view();
  p.v = d_v.view();
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  p.options.softmax_scale = cfg.softmax_scale;
  p.options.causal = cfg.causal;
  p.options.window_left = cfg.window_left;
  p.options.window_right = cfg.window_right;
  p.options.softcap = cfg.softcap;
  p.options.backend = backend;
  p.dropout_p = cfg.dropout_p;
  if (c.mode == DistMode::ring) {
    dist::ring_forward(comm, p, spec, run.stream);
  } else {
    dist::allgather_forward(comm, p, spec, run.stream);
  }

  // download() waits for the device, and with it for `stream`.
  DistOutputs r;
  r.fwd.out = gathered(host_comm, d_out.download(), in.q.shape(), rd, spec);
  r.fwd.lse = gathered(host_comm, d_lse.download(), full_lse.shape(), ld, spec);
  if (!c.backward) return r;

  const DeviceTensor d_dout(shard_of(in.dout, rd, spec, world, rank), dev);
  const DeviceTensor d_dq(full_like(q, cfg.dtype), dev), d_dk(full_like(k, cfg.dtype), dev),
      d_dv(full_like(v, cfg.dtype), dev);
  flashattn::BwdParams b;
  static_cast<flashattn::FwdParams&>(b) = p;
  b.dout = d_dout.view();
  b.dq = d_dq.view();
  b.dk = d_dk.view();
  b.dv = d_dv.view();
  dist::ring_backward(comm, b, spec, run.stream);
  r.bwd.dq = gathered(host_comm, d_dq.download(), in.q.shape(), rd, spec);
  r.bwd.dk = gathered(host_comm, d_dk.download(), in.k.shape(), rd, spec);
  r.bwd.dv = gathered(host_comm, d_dv.download(), in.v.shape(), rd, spec);
  return r;
}

}  // namespace fa_test
