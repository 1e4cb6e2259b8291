#include "config.h"

#include <sstream>

namespace fabench {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::fwd:
      return "fwd";
    case Mode::bwd:
      return "bwd";
    case Mode::fwdbwd:
      return "fwdbwd";
  }
  return "unknown";
}

bool BenchConfig::same_tensors(const BenchConfig& o) const {
  return batch == o.batch && seqlen_q == o.seqlen_q && seqlen_k == o.seqlen_k && heads == o.heads &&
         heads_k == o.heads_k && head_dim == o.head_dim && dtype == o.dtype && has_backward() == o.has_backward();
}

std::string BenchConfig::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " Sq=" << seqlen_q << " Sk=" << seqlen_k << " H=" << heads << " Hk=" << heads_k
    << " D=" << head_dim << " " << flashattn::dtype_name(dtype) << " " << mode_name(mode);
  if (causal) s << " causal";
  if (window_left >= 0 || window_right >= 0) s << " window=" << window_left << "," << window_right;
  if (softcap > 0) s << " softcap=" << softcap;
  if (dropout > 0) s << " dropout=" << dropout;
  if (deterministic) s << " deterministic";
  return s.str();
}

std::vector<BenchConfig> sweep_configs(const BenchConfig& base, const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& seqlens) {
  constexpr int64_t kHidden = 2048, kTokens = 16384;
  std::vector<BenchConfig> out;
  for (int64_t d : dims) {
    for (int64_t s : seqlens) {
      for (bool causal : {false, true}) {
        BenchConfig c = base;
        c.head_dim = d;
        c.heads = c.heads_k = kHidden / d;
        c.seqlen_q = c.seqlen_k = s;
        c.batch = s >= kTokens ? 1 : kTokens / s;
        c.causal = causal;
        out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace fabench
