#include "selection.h"

#include <algorithm>
#include <ostream>

namespace fabench {

namespace {

using flashattn::DeviceType;

bool cuda_usable() { return flashattn::built_with_cuda() && flashattn::cuda_device_count() > 0; }

std::string names_of(const std::vector<flashattn::BackendInfo>& all) {
  std::string s;
  for (const flashattn::BackendInfo& b : all) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

// Support depends on shapes, dtypes, devices and options, never on the data: the tensors of the query
// all point at one aligned dummy buffer that nobody reads.
flashattn::BwdParams query_params(const BenchConfig& c, flashattn::Device device) {
  alignas(256) static unsigned char dummy[256];
  auto t = [&](DType dtype, std::initializer_list<int64_t> shape) {
    return flashattn::Tensor::contiguous(dummy, dtype, shape, device);
  };
  flashattn::BwdParams p;
  p.q = t(c.dtype, {c.batch, c.seqlen_q, c.heads, c.head_dim});
  p.k = t(c.dtype, {c.batch, c.seqlen_k, c.heads_k, c.head_dim});
  p.v = t(c.dtype, {c.batch, c.seqlen_k, c.heads_k, c.head_dim});
  p.out = t(c.dtype, {c.batch, c.seqlen_q, c.heads, c.head_dim});
  p.softmax_lse = t(DType::f32, {c.batch, c.heads, c.seqlen_q});
  p.dout = p.dq = p.out;
  p.dk = p.dv = p.k;
  p.options.causal = c.causal;
  p.options.window_left = c.window_left;
  p.options.window_right = c.window_right;
  p.options.softcap = c.softcap;
  p.dropout_p = c.dropout;
  return p;
}

}  // namespace

Selection select_backends(const Options& o) {
  const std::vector<flashattn::BackendInfo> all = flashattn::list_backends();
  for (const std::string& name : o.impls) {
    const bool known = std::any_of(all.begin(), all.end(), [&](const auto& b) { return b.name == name; });
    if (!known) throw UsageError("--impl: expected 'all' or names among {" + names_of(all) + "}, got '" + name + "'");
  }
  const bool gpu = cuda_usable();
  // A sweep's large configs would take the CPU backends hours: unless told otherwise it runs on the GPU
  // when there is one.
  const DeviceChoice choice =
      o.device.value_or(o.sweep && o.impls.empty() && gpu ? DeviceChoice::cuda : DeviceChoice::all);
  if (choice == DeviceChoice::cuda && !flashattn::built_with_cuda())
    throw UsageError("--device cuda: this build has no CUDA backends (configure with -DFLASHATTN_CUDA=ON)");
  if (choice == DeviceChoice::cuda && !gpu) throw UsageError("--device cuda: no CUDA device is visible");

  Selection s;
  for (const flashattn::BackendInfo& b : all) {
    if (!o.impls.empty() && std::find(o.impls.begin(), o.impls.end(), b.name) == o.impls.end()) continue;
    const bool on_cuda = b.device == DeviceType::cuda;
    if ((on_cuda && choice == DeviceChoice::cpu) || (!on_cuda && choice == DeviceChoice::cuda)) continue;
    if (on_cuda && !gpu) {
      s.notes.push_back(b.name + " not run: no CUDA device is visible");
      continue;
    }
    s.backends.push_back(b);
    (on_cuda ? s.cuda : s.cpu) = true;
  }
  if (s.backends.empty())
    throw UsageError("no backend left to run: --impl and --device select none of {" + names_of(all) +
                     "} on this machine");
  return s;
}

void print_support(std::ostream& os, const BenchConfig& c) {
  os << "backends for " << c.describe() << " (dispatch order):\n";
  // One query per device: a backend is asked about tensors on its own device. A device's query can fail
  // on its own (a CUDA backend may need the device to answer), which must not hide the other's answers.
  // fwd+bwd needs both directions, so there the forward's answer is folded into the backward's.
  using Answers = std::vector<flashattn::BackendSupport>;
  Answers fwd[2], bwd[2];
  std::string failure[2];
  for (int d = 0; d < 2; ++d) {
    try {
      const flashattn::BwdParams p = query_params(c, d == 1 ? flashattn::Device::cuda(0) : flashattn::Device::cpu());
      fwd[d] = flashattn::query_backends(static_cast<const flashattn::FwdParams&>(p));
      if (c.has_backward()) bwd[d] = flashattn::query_backends(p);
    } catch (const std::exception& e) {
      failure[d] = e.what();
    }
  }
  const bool gpu = cuda_usable();
  const std::vector<flashattn::BackendInfo> all = flashattn::list_backends();
  for (size_t i = 0; i < all.size(); ++i) {
    const int d = all[i].device == DeviceType::cuda ? 1 : 0;
    std::string name = all[i].name;
    name.resize(std::max<size_t>(name.size() + 1, 18), ' ');
    os << "  " << name << (d == 1 ? "cuda  " : "cpu   ");
    if (!failure[d].empty()) {
      os << "query failed: " << failure[d];
    } else {
      const flashattn::BackendSupport& f = fwd[d][i];
      const flashattn::BackendSupport& a = c.has_backward() ? bwd[d][i] : f;
      if (c.mode == Mode::fwdbwd && !f.supported)
        os << "unsupported: forward: " << f.reason;
      else
        os << (a.supported ? "supported" : "unsupported: " + a.reason);
      if (a.chosen) os << "  [dispatch default]";
    }
    if (d == 1 && !gpu) os << "  (no CUDA device visible here)";
    os << "\n";
  }
}

}  // namespace fabench
