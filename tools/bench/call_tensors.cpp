#include "call_tensors.h"

namespace fabench {

CallTensors::CallTensors(const BenchConfig& cfg, const HostInputs& inputs, Device device, flashattn::Stream stream)
    : cfg_(cfg) {
  const int64_t q_numel = cfg.batch * cfg.seqlen_q * cfg.heads * cfg.head_dim;
  const int64_t k_numel = cfg.batch * cfg.seqlen_k * cfg.heads_k * cfg.head_dim;
  q_ = Buffer(device, cfg.dtype, q_numel, stream);
  k_ = Buffer(device, cfg.dtype, k_numel, stream);
  v_ = Buffer(device, cfg.dtype, k_numel, stream);
  // The FP8 forward writes bf16 (FwdParams::out).
  out_ = Buffer(device, cfg.dtype == DType::fp8_e4m3 ? DType::bf16 : cfg.dtype, q_numel, stream);
  lse_ = Buffer(device, DType::f32, cfg.batch * cfg.heads * cfg.seqlen_q, stream);
  q_.upload(inputs.q);
  k_.upload(inputs.k);
  v_.upload(inputs.v);
  if (cfg.has_backward()) {
    dout_ = Buffer(device, cfg.dtype, q_numel, stream);
    dq_ = Buffer(device, cfg.dtype, q_numel, stream);
    dk_ = Buffer(device, cfg.dtype, k_numel, stream);
    dv_ = Buffer(device, cfg.dtype, k_numel, stream);
    dout_.upload(inputs.dout);
  }
}

flashattn::BwdParams CallTensors::params(const std::string& backend) const {
  const BenchConfig& c = cfg_;
  flashattn::BwdParams p;
  p.q = q_.view({c.batch, c.seqlen_q, c.heads, c.head_dim});
  p.k = k_.view({c.batch, c.seqlen_k, c.heads_k, c.head_dim});
  p.v = v_.view({c.batch, c.seqlen_k, c.heads_k, c.head_dim});
  p.out = out_.view({c.batch, c.seqlen_q, c.heads, c.head_dim});
  p.softmax_lse = lse_.view({c.batch, c.heads, c.seqlen_q});
  p.options.causal = c.causal;
  p.options.window_left = c.window_left;
  p.options.window_right = c.window_right;
  p.options.softcap = c.softcap;
  p.options.backend = backend;
  p.deterministic = c.deterministic;
  p.dropout_p = c.dropout;
  p.seed = c.dropout_seed;
  p.offset = c.dropout_offset;
  if (c.has_backward()) {
    p.dout = dout_.view({c.batch, c.seqlen_q, c.heads, c.head_dim});
    p.dq = dq_.view({c.batch, c.seqlen_q, c.heads, c.head_dim});
    p.dk = dk_.view({c.batch, c.seqlen_k, c.heads_k, c.head_dim});
    p.dv = dv_.view({c.batch, c.seqlen_k, c.heads_k, c.head_dim});
  }
  return p;
}

void CallTensors::poison_outputs() {
  out_.poison();
  lse_.poison();
  if (cfg_.has_backward()) {
    dq_.poison();
    dk_.poison();
    dv_.poison();
  }
}

RunOutputs CallTensors::download() const {
  RunOutputs r;
  if (cfg_.mode != Mode::bwd) {
    r.out = out_.download();
    r.lse = lse_.download();
  }
  if (cfg_.has_backward()) {
    r.dq = dq_.download();
    r.dk = dk_.download();
    r.dv = dv_.download();
  }
  return r;
}

}  // namespace fabench
