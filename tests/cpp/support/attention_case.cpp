#include "attention_case.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace fa_test {

std::string AttnConfig::name() const {
  std::ostringstream s;
  s << flashattn::dtype_name(dtype) << "_d" << head_dim << "_h" << heads << "x" << heads_k;
  if (varlen()) {
    s << "_varlen";
    for (size_t i = 0; i < varlen_q.size(); ++i) s << "_" << varlen_q[i] << "x" << varlen_k[i];
  } else {
    s << "_b" << batch << "_q" << seqlen_q << "_k" << seqlen_k;
  }
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (alibi) s << (alibi_per_batch ? "_alibiBH" : "_alibi");
  if (softcap > 0) s << "_softcap" << softcap;
  if (softmax_scale) s << "_scale" << *softmax_scale;
  if (dropout_p > 0) s << "_drop" << dropout_p;
  return s.str();
}

AttnInputs make_inputs(const AttnConfig& cfg, uint64_t seed) {
  AttnInputs in;
  in.cfg = cfg;
  std::mt19937_64 rng(seed);
  const int64_t H = cfg.heads, Hk = cfg.heads_k, D = cfg.head_dim;
  if (cfg.varlen()) {
    std::vector<int32_t> cq{0}, ck{0};
    for (size_t i = 0; i < cfg.varlen_q.size(); ++i) {
      cq.push_back(cq.back() + int32_t(cfg.varlen_q[i]));
      ck.push_back(ck.back() + int32_t(cfg.varlen_k[i]));
      in.max_seqlen_q = std::max(in.max_seqlen_q, cfg.varlen_q[i]);
      in.max_seqlen_k = std::max(in.max_seqlen_k, cfg.varlen_k[i]);
    }
    in.cu_seqlens_q = i32_tensor(cq);
    in.cu_seqlens_k = i32_tensor(ck);
    in.q = HostTensor(cfg.dtype, {cq.back(), H, D});
    in.k = HostTensor(cfg.dtype, {ck.back(), Hk, D});
    in.v = HostTensor(cfg.dtype, {ck.back(), Hk, D});
    in.dout = HostTensor(cfg.dtype, {cq.back(), H, D});
  } else {
    in.q = HostTensor(cfg.dtype, {cfg.batch, cfg.seqlen_q, H, D});
    in.k = HostTensor(cfg.dtype, {cfg.batch, cfg.seqlen_k, Hk, D});
    in.v = HostTensor(cfg.dtype, {cfg.batch, cfg.seqlen_k, Hk, D});
    in.dout = HostTensor(cfg.dtype, {cfg.batch, cfg.seqlen_q, H, D});
  }
  in.q.fill_normal(rng);
  in.k.fill_normal(rng);
  in.v.fill_normal(rng);
  in.dout.fill_normal(rng);
  if (cfg.alibi) {
    in.alibi = cfg.alibi_per_batch ? HostTensor(DType::f32, {cfg.num_seqs(), H}) : HostTensor(DType::f32, {H});
    in.alibi.fill_uniform(rng, 0.0, 1.0);
  }
  return in;
}

void fill_call_options(flashattn::FwdParams& p, const AttnInputs& in) {
  const AttnConfig& c = in.cfg;
  p.max_seqlen_q = in.max_seqlen_q;
  p.max_seqlen_k = in.max_seqlen_k;
  p.options.softmax_scale = c.softmax_scale;
  p.options.causal = c.causal;
  p.options.window_left = c.window_left;
  p.options.window_right = c.window_right;
  p.options.softcap = c.softcap;
  p.dropout_p = c.dropout_p;
  p.seed = c.dropout_seed;
  p.offset = c.dropout_offset;
}

namespace {

struct Uploaded {
  DeviceTensor q, k, v, alibi, cu_q, cu_k;
};

Uploaded upload(const AttnInputs& in, Device device, DType dt) {
  Uploaded u;
  u.q = DeviceTensor(in.q.as(dt), device);
  u.k = DeviceTensor(in.k.as(dt), device);
  u.v = DeviceTensor(in.v.as(dt), device);
  u.alibi = DeviceTensor(in.alibi, device);
  u.cu_q = DeviceTensor(in.cu_seqlens_q, device);
  u.cu_k = DeviceTensor(in.cu_seqlens_k, device);
  return u;
}

void fill_fwd_params(flashattn::FwdParams& p, const AttnInputs& in, const Uploaded& u, const std::string& backend) {
  fill_call_options(p, in);
  p.q = u.q.view();
  p.k = u.k.view();
  p.v = u.v.view();
  p.cu_seqlens_q = u.cu_q.view();
  p.cu_seqlens_k = u.cu_k.view();
  p.options.alibi_slopes = u.alibi.view();
  p.options.backend = backend;
}

HostTensor lse_shape(const AttnInputs& in) {
  const AttnConfig& c = in.cfg;
  if (c.varlen()) return HostTensor(DType::f32, {c.heads, in.q.shape()[0]});
  return HostTensor(DType::f32, {c.batch, c.heads, c.seqlen_q});
}

}  // namespace

FwdOutputs run_forward(const AttnInputs& in, const std::string& backend, Device device, std::optional<DType> compute,
                       flashattn::Stream stream) {
  const DType dt = compute.value_or(in.cfg.dtype);
  Uploaded u = upload(in, device, dt);
  HostTensor out(dt, in.q.shape()), lse = lse_shape(in);
  out.poison();
  lse.poison();
  DeviceTensor d_out(out, device), d_lse(lse, device);
  flashattn::FwdParams p;
  fill_fwd_params(p, in, u, backend);
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  flashattn::forward(p, stream);
  return FwdOutputs{d_out.download(), d_lse.download()};
}

namespace {

BwdOutputs backward_with(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend, Device device,
                         bool deterministic, DType dt, const std::function<void(const flashattn::BwdParams&)>& call) {
  Uploaded u = upload(in, device, dt);
  DeviceTensor d_out(fwd.out.as(dt), device), d_lse(fwd.lse, device), d_dout(in.dout.as(dt), device);
  HostTensor dq(dt, in.q.shape()), dk(dt, in.k.shape()), dv(dt, in.v.shape());
  dq.poison();
  dk.poison();
  dv.poison();
  DeviceTensor d_dq(dq, device), d_dk(dk, device), d_dv(dv, device);
  flashattn::BwdParams p;
  fill_fwd_params(p, in, u, backend);
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  p.dout = d_dout.view();
  p.dq = d_dq.view();
  p.dk = d_dk.view();
  p.dv = d_dv.view();
  p.deterministic = deterministic;
  call(p);
  return BwdOutputs{d_dq.download(), d_dk.download(), d_dv.download()};
}

}  // namespace

BwdOutputs run_backward(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend, Device device,
                        bool deterministic, std::optional<DType> compute, flashattn::Stream stream) {
  return backward_with(in, fwd, backend, device, deterministic, compute.value_or(in.cfg.dtype),
                       [&](const flashattn::BwdParams& p) { flashattn::backward(p, stream); });
}

BwdOutputs run_backward_via(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend, Device device,
                            bool deterministic, const std::function<void(const flashattn::BwdParams&)>& call) {
  return backward_with(in, fwd, backend, device, deterministic, in.cfg.dtype, call);
}

FwdOutputs reference_forward(const AttnInputs& in) {
  return run_forward(in, "cpu_reference", Device::cpu(), DType::f32);
}

BwdOutputs reference_backward(const AttnInputs& in) {
  FwdOutputs fwd = reference_forward(in);
  return run_backward(in, fwd, "cpu_reference", Device::cpu(), false, DType::f32);
}

Device device_of(const std::string& backend) {
  const std::string name = backend.substr(0, backend.find('@'));  // "cpu_flash@<isa>": backend_params.h
  for (const flashattn::BackendInfo& b : flashattn::list_backends())
    if (b.name == name) return b.device == flashattn::DeviceType::cuda ? Device::cuda(0) : Device::cpu();
  throw std::runtime_error("device_of: unknown backend " + backend);
}

std::vector<std::string> runnable_backends(flashattn::DeviceType type) {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) {
    if (b.name == "cpu_reference" || b.device != type) continue;
    if (type == flashattn::DeviceType::cuda && !cuda_available()) continue;
    out.push_back(b.name);
  }
  return out;
}

}  // namespace fa_test
