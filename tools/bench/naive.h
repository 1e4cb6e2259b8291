#pragma once

// Naive attention in the storage dtype: fp32 dot products with every intermediate (scores, logits,
// probabilities, out, dP, dS, gradients) rounded to the dtype, as an unfused framework math path computes
// it. Its error against the fp64 reference is the yardstick of flash-attn's criterion: a backend may err
// at most twice as much (plus a small floor). Same model as tests/cpp/support/naive_lowp, on the
// (possibly sliced) f32 buffers of a bench check.

#include <cstdint>
#include <vector>

#include "api/problem.h"
#include "config.h"

namespace fabench {

// Dense f32 tensors holding dtype-exact values: q, dout (batches, rows, heads, dim); k, v (batches,
// keys, heads_k, dim). `rows` are the last rows of the call's queries, so the bottom-right aligned mask of
// (rows, keys) is the call's own.
struct NaiveProblem {
  int64_t batches = 0, rows = 0, keys = 0, heads = 0, heads_k = 0, dim = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  DType dtype = DType::f16;
  float scale = 1.0f, softcap = 0.0f;
  int64_t window_left = -1, window_right = -1;  // causal already folded into window_right = 0
  // Dropout counters use the call's own coordinates: query row row_offset + i of a call with call_heads.
  flashattn::detail::DropoutParams dropout;
  int64_t row_offset = 0, call_heads = 0;
};

struct NaiveResult {
  std::vector<float> out, lse;    // (batches, rows, heads, dim), (batches, heads, rows)
  std::vector<float> dq, dk, dv;  // like q, k, v; empty without backward
};

NaiveResult naive_attention(const NaiveProblem& p, bool with_backward);

}  // namespace fabench
