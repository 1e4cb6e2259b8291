#pragma once

// The reference's per-head math in fp64, on dense row-major buffers gathered by the callers
// (forward, backward, kvcache). Materialises the (sq x sk) score matrix: it is the oracle, not fast.

#include <cstdint>
#include <functional>
#include <vector>

#include "common/score.h"

namespace flashattn::detail::reference {

struct HeadInputs {
  int64_t sq = 0, sk = 0, dim = 0;
  std::vector<double> q, k, v;  // (sq, dim), (sk, dim), (sk, dim)
};

// Keep decision and scale of dropout for element (i, j); empty when there is no dropout.
struct DropoutMask {
  std::function<bool(int64_t i, int64_t j)> keep;
  double scale = 1.0;  // 1 / (1 - p)
};

// Raw dot products q_i . k_j for every (i, j); masked-out entries are left unspecified.
std::vector<double> dot_products(const HeadInputs& in);

// Softmax probabilities P (sq x sk, zero where masked) and log-sum-exp per row (+inf for a row with
// no visible key).
void softmax_probs(const HeadInputs& in, const std::vector<double>& qk, const Mask& mask, const ScoreMod<double>& mod,
                   std::vector<double>& probs, std::vector<double>& lse);

// out (sq x dim) = dropout(P) V; rows with no visible key are 0.
void attend(const HeadInputs& in, const Mask& mask, const ScoreMod<double>& mod, const DropoutMask& drop,
            std::vector<double>& out, std::vector<double>& lse);

}  // namespace flashattn::detail::reference
