#include "cpu/reference/head_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashattn::detail::reference {

std::vector<double> dot_products(const HeadInputs& in) {
  std::vector<double> qk(static_cast<size_t>(in.sq * in.sk), 0.0);
  for (int64_t i = 0; i < in.sq; ++i)
    for (int64_t j = 0; j < in.sk; ++j) {
      double acc = 0;
      for (int64_t d = 0; d < in.dim; ++d) acc += in.q[i * in.dim + d] * in.k[j * in.dim + d];
      qk[i * in.sk + j] = acc;
    }
  return qk;
}

void softmax_probs(const HeadInputs& in, const std::vector<double>& qk, const Mask& mask, const ScoreMod<double>& mod,
                   std::vector<double>& probs, std::vector<double>& lse) {
  probs.assign(size_t(in.sq * in.sk), 0.0);
  lse.assign(size_t(in.sq), std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < in.sq; ++i) {
    const int64_t begin = mask.key_begin(i), end = mask.key_end(i);
    if (begin >= end) continue;
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t j = begin; j < end; ++j) {
      double s = mod(qk[i * in.sk + j], mask.diagonal(i) - j);
      probs[i * in.sk + j] = s;
      m = std::max(m, s);
      nan = nan || std::isnan(s);
    }
    // Every visible logit -inf: the row is treated as one with no visible key (out 0, LSE +inf), as the
    // fused kernels do and as PyTorch's math path does since its softmax became "safe" (docs/reliability.md).
    // A NaN logit instead makes the whole row NaN, through the sum below.
    if (m == -std::numeric_limits<double>::infinity() && !nan) {
      std::fill(probs.begin() + i * in.sk + begin, probs.begin() + i * in.sk + end, 0.0);
      continue;
    }
    double sum = 0;
    for (int64_t j = begin; j < end; ++j) sum += std::exp(probs[i * in.sk + j] - m);
    lse[i] = m + std::log(sum);
    for (int64_t j = begin; j < end; ++j) probs[i * in.sk + j] = std::exp(probs[i * in.sk + j] - lse[i]);
  }
}

void attend(const HeadInputs& in, const Mask& mask, const ScoreMod<double>& mod, const DropoutMask& drop,
            std::vector<double>& out, std::vector<double>& lse) {
  std::vector<double> probs;
  softmax_probs(in, dot_products(in), mask, mod, probs, lse);
  out.assign(size_t(in.sq * in.dim), 0.0);
  for (int64_t i = 0; i < in.sq; ++i)
    for (int64_t j = mask.key_begin(i); j < mask.key_end(i); ++j) {
      double p = probs[i * in.sk + j];
      if (drop.keep) p = drop.keep(i, j) ? p * drop.scale : 0.0;
      // No shortcut for p == 0: 0 * NaN (or inf) in v must reach the output, as in P @ V.
      for (int64_t d = 0; d < in.dim; ++d) out[i * in.dim + d] += p * in.v[j * in.dim + d];
    }
}

}  // namespace flashattn::detail::reference
