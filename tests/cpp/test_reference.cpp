// The oracle itself: gradients against central finite differences of its own forward, and closed-form
// cases (uniform attention, fully masked rows).

#include <gtest/gtest.h>

#include <cmath>

#include "attention_case.h"

namespace fa_test {
namespace {

// L = sum(out * dout): its gradient w.r.t. q, k, v is what backward returns for that dout.
double loss(const AttnInputs& in) {
  const FwdOutputs f = run_forward(in, "cpu_reference", Device::cpu());
  const std::vector<double> out = f.out.to_double(), g = in.dout.to_double();
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
  return l;
}

void check_gradients(AttnConfig cfg) {
  cfg.dtype = DType::f32;
  AttnInputs in = make_inputs(cfg, 77);
  const FwdOutputs fwd = run_forward(in, "cpu_reference", Device::cpu());
  const BwdOutputs grads = run_backward(in, fwd, "cpu_reference", Device::cpu());
  std::mt19937_64 rng(5);
  const double h = 1e-2;
  struct Target {
    HostTensor* x;
    const HostTensor* g;
    const char* name;
  } targets[] = {{&in.q, &grads.dq, "dq"}, {&in.k, &grads.dk, "dk"}, {&in.v, &grads.dv, "dv"}};
  for (const Target& t : targets) {
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t i = int64_t(rng() % uint64_t(t.x->numel()));
      const double x0 = t.x->get(i);
      t.x->set(i, x0 + h);
      const double lp = loss(in);
      t.x->set(i, x0 - h);
      const double lm = loss(in);
      t.x->set(i, x0);
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(t.g->get(i), fd, 2e-3 * (1.0 + std::fabs(fd))) << t.name << " element " << i << " of " << cfg.name();
    }
  }
}

TEST(ReferenceGradients, Plain) {
  AttnConfig c;
  c.batch = 1, c.seqlen_q = 5, c.seqlen_k = 7, c.heads = 2, c.heads_k = 1, c.head_dim = 8;
  check_gradients(c);
}

TEST(ReferenceGradients, CausalSoftcapAlibi) {
  AttnConfig c;
  c.batch = 2, c.seqlen_q = 6, c.seqlen_k = 4, c.heads = 2, c.heads_k = 2, c.head_dim = 8;
  c.causal = true;
  c.softcap = 1.5f;
  c.alibi = true;
  check_gradients(c);
}

TEST(ReferenceGradients, WindowDropoutVarlen) {
  AttnConfig c;
  c.heads = 4, c.heads_k = 2, c.head_dim = 16;
  c.varlen_q = {3, 0, 6};
  c.varlen_k = {5, 2, 6};
  c.window_left = 2;
  c.window_right = 1;
  c.dropout_p = 0.3f;
  check_gradients(c);
}

TEST(ReferenceForward, ZeroQueriesAverageValues) {
  AttnConfig c;
  c.dtype = DType::f32;
  c.batch = 1, c.seqlen_q = 3, c.seqlen_k = 5, c.heads = 1, c.heads_k = 1, c.head_dim = 8;
  AttnInputs in = make_inputs(c, 3);
  in.q.fill(0.0);
  const FwdOutputs f = run_forward(in, "cpu_reference", Device::cpu());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t d = 0; d < 8; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < 5; ++j) mean += in.v.get(j * 8 + d) / 5.0;
      EXPECT_NEAR(f.out.get(i * 8 + d), mean, 1e-6);
    }
  for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(f.lse.get(i), std::log(5.0), 1e-6);
}

TEST(ReferenceForward, FullyMaskedRowsGiveZeroAndInfiniteLse) {
  AttnConfig c;
  c.dtype = DType::f32;
  c.batch = 1, c.seqlen_q = 6, c.seqlen_k = 2, c.heads = 1, c.heads_k = 1, c.head_dim = 8;
  c.causal = true;  // queries 0..3 see no key: i + Sk - Sq < 0
  const AttnInputs in = make_inputs(c, 4);
  const FwdOutputs f = run_forward(in, "cpu_reference", Device::cpu());
  for (int64_t i = 0; i < 6; ++i) {
    const bool empty = i < 4;
    EXPECT_EQ(std::isinf(f.lse.get(i)), empty) << "row " << i;
    if (empty)
      for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(f.out.get(i * 8 + d), 0.0);
  }
}

}  // namespace
}  // namespace fa_test
