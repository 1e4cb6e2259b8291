#include "attention_case.h"

#include <algorithm>
#include <functional>
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
  if (page_size > 0) s << "_page" << page_size;
  if (seqused_k) s << "_seqused";
  if (descale) s << "_descale";
  return s.str();
}

namespace {

// The K/V a paged or seqused_k call reads (AttnConfig::page_size, seqused_k) from the contiguous in.k/in.v.
void make_call_keys(AttnInputs& in, std::mt19937_64& rng) {
  const AttnConfig& c = in.cfg;
  const int64_t B = c.num_seqs(), Hk = c.heads_k, D = c.head_dim, row = Hk * D;
  std::vector<int64_t> span(static_cast<size_t>(B));
  std::vector<int32_t> cu{0}, used;
  for (int64_t b = 0; b < B; ++b) {
    span[size_t(b)] = c.varlen_k[size_t(b)] + (c.seqused_k ? 1 + b % 3 : 0);
    cu.push_back(cu.back() + int32_t(span[size_t(b)]));
    used.push_back(int32_t(c.varlen_k[size_t(b)]));
    in.call_max_seqlen_k = std::max(in.call_max_seqlen_k, span[size_t(b)]);
  }
  in.call_cu_seqlens_k = i32_tensor(cu);
  if (c.seqused_k) in.seqused_k = i32_tensor(used);
  const int32_t* ck = in.cu_seqlens_k.i32();
  // Key j of sequence b goes to element `dst` of the call's tensors (dst_row(b, j) * Hk * D).
  auto place = [&](const std::function<int64_t(int64_t, int64_t)>& dst_row) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < c.varlen_k[size_t(b)]; ++j)
        for (int64_t e = 0; e < row; ++e) {
          in.call_k.set(dst_row(b, j) * row + e, in.k.get((ck[b] + j) * row + e));
          in.call_v.set(dst_row(b, j) * row + e, in.v.get((ck[b] + j) * row + e));
        }
  };
  if (c.page_size == 0) {
    in.call_k = HostTensor(c.dtype, {cu.back(), Hk, D});
    in.call_v = HostTensor(c.dtype, {cu.back(), Hk, D});
    in.call_k.poison();
    in.call_v.poison();
    place([&](int64_t b, int64_t j) { return cu[size_t(b)] + j; });
    return;
  }
  // Every page of every span gets a distinct block, two spare blocks stay unused, the order is shuffled,
  // and table entries past a sequence's pages are -1 (never read).
  const int64_t P = c.page_size;
  int64_t max_pages = 1, total_pages = 0;
  for (int64_t s : span) {
    max_pages = std::max(max_pages, (s + P - 1) / P + 1);
    total_pages += (s + P - 1) / P;
  }
  const int64_t num_blocks = total_pages + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) ids[size_t(i)] = int32_t(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(B * max_pages), -1);
  int64_t next = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < (span[size_t(b)] + P - 1) / P; ++i) table[size_t(b * max_pages + i)] = ids[size_t(next++)];
  in.block_table = i32_tensor(table, {B, max_pages});
  in.call_k = HostTensor(c.dtype, {num_blocks, P, Hk, D});
  in.call_v = HostTensor(c.dtype, {num_blocks, P, Hk, D});
  in.call_k.poison();
  in.call_v.poison();
  place([&](int64_t b, int64_t j) { return int64_t(table[size_t(b * max_pages + j / P)]) * P + j % P; });
}

}  // namespace

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
  if (cfg.varlen() && cfg.paged_or_seqused()) make_call_keys(in, rng);
  if (cfg.descale)
    for (HostTensor* t : {&in.q_descale, &in.k_descale, &in.v_descale}) {
      *t = HostTensor(DType::f32, {cfg.num_seqs(), Hk});
      t->fill_uniform(rng, 0.25, 2.0);
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
  DeviceTensor q, k, v, alibi, cu_q, cu_k, block_table, seqused_k, q_descale, k_descale, v_descale;
};

Uploaded upload(const AttnInputs& in, Device device, DType dt) {
  const bool call_keys = in.call_k.present();
  Uploaded u;
  u.q = DeviceTensor(in.q.as(dt), device);
  u.k = DeviceTensor((call_keys ? in.call_k : in.k).as(dt), device);
  u.v = DeviceTensor((call_keys ? in.call_v : in.v).as(dt), device);
  u.alibi = DeviceTensor(in.alibi, device);
  u.cu_q = DeviceTensor(in.cu_seqlens_q, device);
  u.cu_k = DeviceTensor(call_keys ? in.call_cu_seqlens_k : in.cu_seqlens_k, device);
  u.block_table = DeviceTensor(in.block_table, device);
  u.seqused_k = DeviceTensor(in.seqused_k, device);
  u.q_descale = DeviceTensor(in.q_descale, device);
  u.k_descale = DeviceTensor(in.k_descale, device);
  u.v_descale = DeviceTensor(in.v_descale, device);
  return u;
}

void fill_fwd_params(flashattn::FwdParams& p, const AttnInputs& in, const Uploaded& u, const std::string& backend) {
  fill_call_options(p, in);
  if (in.call_k.present()) p.max_seqlen_k = in.call_max_seqlen_k;
  p.q = u.q.view();
  p.k = u.k.view();
  p.v = u.v.view();
  p.cu_seqlens_q = u.cu_q.view();
  p.cu_seqlens_k = u.cu_k.view();
  p.block_table = u.block_table.view();
  p.seqused_k = u.seqused_k.view();
  p.options.alibi_slopes = u.alibi.view();
  p.options.backend = backend;
  p.q_descale = u.q_descale.view();
  p.k_descale = u.k_descale.view();
  p.v_descale = u.v_descale.view();
}

HostTensor lse_shape(const AttnInputs& in) {
  const AttnConfig& c = in.cfg;
  if (c.varlen()) return HostTensor(DType::f32, {c.heads, in.q.shape()[0]});
  return HostTensor(DType::f32, {c.batch, c.heads, c.seqlen_q});
}

FwdOutputs forward_with(const AttnInputs& in, const std::string& backend, Device device, DType dt,
                        const std::function<void(const flashattn::FwdParams&)>& call) {
  Uploaded u = upload(in, device, dt);
  // FP8 attention writes bf16.
  HostTensor out(dt == DType::fp8_e4m3 ? DType::bf16 : dt, in.q.shape()), lse = lse_shape(in);
  out.poison();
  lse.poison();
  DeviceTensor d_out(out, device), d_lse(lse, device);
  flashattn::FwdParams p;
  fill_fwd_params(p, in, u, backend);
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  call(p);
  return FwdOutputs{d_out.download(), d_lse.download()};
}

}  // namespace

FwdOutputs run_forward(const AttnInputs& in, const std::string& backend, Device device, std::optional<DType> compute,
                       flashattn::Stream stream) {
  return forward_with(in, backend, device, compute.value_or(in.cfg.dtype),
                      [&](const flashattn::FwdParams& p) { flashattn::forward(p, stream); });
}

FwdOutputs run_forward_via(const AttnInputs& in, const std::string& backend, Device device,
                           const std::function<void(const flashattn::FwdParams&)>& call) {
  return forward_with(in, backend, device, in.cfg.dtype, call);
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
  return run_forward(contiguous_keys(in), "cpu_reference", Device::cpu(), DType::f32);
}

AttnInputs contiguous_keys(const AttnInputs& in) {
  AttnInputs plain = in;
  plain.cfg.page_size = 0;
  plain.cfg.seqused_k = false;
  plain.call_k = plain.call_v = plain.call_cu_seqlens_k = plain.block_table = plain.seqused_k = HostTensor();
  return plain;
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
