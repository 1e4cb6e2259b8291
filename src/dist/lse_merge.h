#pragma once

// Merging a block's partial result (out_p, lse_p) into a row's running one (acc, lse_a), as the ring's
// forward does on the host (host_ops.cpp) and on CUDA (cuda_ops.cu): one function, so both backends
// round the same way. log(exp(lse_a) + exp(lse_p)) is computed around the larger of the two so nothing
// overflows; the caller then sets acc = w_acc * acc + w_part * out_p and lse_a = lse.

#include <cmath>

#include "common/host_device.h"

namespace flashattn::dist::detail {

struct LseMerge {
  float lse;     // log(exp(lse_a) + exp(lse_p))
  float w_acc;   // exp(lse_a - lse): the weight of the running accumulator
  float w_part;  // exp(lse_p - lse): the weight of the partial
};

FA_HD LseMerge lse_merge(float lse_a, float lse_p) {
  const float hi = lse_a > lse_p ? lse_a : lse_p, lo = lse_a > lse_p ? lse_p : lse_a;
  const float lse = hi + log1pf(expf(lo - hi));
  return {lse, expf(lse_a - lse), expf(lse_p - lse)};
}

}  // namespace flashattn::dist::detail
