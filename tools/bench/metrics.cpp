#include "metrics.h"

#include "common/score.h"

namespace fabench {

int64_t visible_pairs(const BenchConfig& c) {
  const flashattn::detail::Mask mask{c.seqlen_q, c.seqlen_k, c.window_left, c.causal ? 0 : c.window_right};
  int64_t pairs = 0;
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    const int64_t n = mask.key_end(i) - mask.key_begin(i);
    if (n > 0) pairs += n;
  }
  return pairs;
}

double flop_count(const BenchConfig& c) {
  const double fwd = 4.0 * double(c.batch) * double(c.heads) * double(c.head_dim) * double(visible_pairs(c));
  switch (c.mode) {
    case Mode::fwd:
      return fwd;
    case Mode::bwd:
      return 2.5 * fwd;
    case Mode::fwdbwd:
      return 3.5 * fwd;
  }
  return fwd;
}

double byte_count(const BenchConfig& c) {
  const double elem = flashattn::dtype_size(c.dtype);
  const double q_like = double(c.batch) * double(c.seqlen_q) * double(c.heads) * double(c.head_dim) * elem;
  const double k_like = double(c.batch) * double(c.seqlen_k) * double(c.heads_k) * double(c.head_dim) * elem;
  const double out = c.dtype == DType::fp8_e4m3 ? q_like * 2 : q_like;  // FP8's out is bf16
  const double fwd = q_like + out + 2 * k_like;                         // q, out; k, v
  const double bwd = 4 * q_like + 4 * k_like;                           // q, out, dout, dq; k, v, dk, dv
  switch (c.mode) {
    case Mode::fwd:
      return fwd;
    case Mode::bwd:
      return bwd;
    case Mode::fwdbwd:
      return fwd + bwd;
  }
  return fwd;
}

}  // namespace fabench
