// Dropout's counter-based RNG: keep rate, reproducibility, independence of (seed, offset) and position.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attention_case.h"
#include "common/philox.h"

namespace fa_test {
namespace {

using flashattn::detail::dropout_keep;
using flashattn::detail::DropoutParams;

TEST(Dropout, KeepRateMatchesProbability) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const DropoutParams d{p, 123456789ull, 42};
    int64_t kept = 0, n = 0;
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 100; ++i)
        for (int64_t j = 0; j < 250; ++j, ++n) kept += dropout_keep(d, 1, h, 4, i, j);
    const double rate = double(kept) / double(n), expect = 1.0 - p;
    const double sigma = std::sqrt(expect * (1 - expect) / double(n));
    EXPECT_NEAR(rate, expect, 5 * sigma) << "p = " << p;
  }
}

TEST(Dropout, MaskDependsOnSeedOffsetAndPosition) {
  const DropoutParams a{0.5f, 1, 0}, b{0.5f, 2, 0}, c{0.5f, 1, 1};
  int diff_seed = 0, diff_offset = 0, diff_head = 0;
  for (int64_t j = 0; j < 1000; ++j) {
    diff_seed += dropout_keep(a, 0, 0, 2, 3, j) != dropout_keep(b, 0, 0, 2, 3, j);
    diff_offset += dropout_keep(a, 0, 0, 2, 3, j) != dropout_keep(c, 0, 0, 2, 3, j);
    diff_head += dropout_keep(a, 0, 0, 2, 3, j) != dropout_keep(a, 0, 1, 2, 3, j);
  }
  // independent masks at p = 0.5 differ in about half the positions
  for (int d : {diff_seed, diff_offset, diff_head}) {
    EXPECT_GT(d, 400);
    EXPECT_LT(d, 600);
  }
}

TEST(Dropout, SameSeedSameOutputOtherSeedOtherOutput) {
  AttnConfig c;
  c.dtype = DType::f32;
  c.dropout_p = 0.3f;
  const AttnInputs in = make_inputs(c, 9);
  for (const std::string& backend : runnable_backends(flashattn::DeviceType::cpu)) {
    const FwdOutputs a = run_forward(in, backend, Device::cpu()), b = run_forward(in, backend, Device::cpu());
    EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.nbytes()), 0) << backend;
    AttnInputs other = in;
    other.cfg.dropout_seed += 1;
    const FwdOutputs d = run_forward(other, backend, Device::cpu());
    EXPECT_NE(std::memcmp(a.out.data(), d.out.data(), a.out.nbytes()), 0) << backend;
  }
}

TEST(Dropout, ExpectationIsUndroppedAttention) {
  // Averaged over many seeds, dropout(P) V / (1 - p) tends to P V: the 1 / (1 - p) scale is right.
  AttnConfig c;
  c.dtype = DType::f32;
  c.batch = 1, c.seqlen_q = 4, c.seqlen_k = 16, c.heads = 1, c.heads_k = 1, c.head_dim = 8;
  AttnInputs in = make_inputs(c, 10);
  const std::vector<double> plain = run_forward(in, "cpu_reference", Device::cpu()).out.to_double();
  in.cfg.dropout_p = 0.5f;
  std::vector<double> mean(plain.size(), 0.0);
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    in.cfg.dropout_seed = uint64_t(t);
    const std::vector<double> o = run_forward(in, "cpu_reference", Device::cpu()).out.to_double();
    for (size_t i = 0; i < o.size(); ++i) mean[i] += o[i] / trials;
  }
  for (size_t i = 0; i < mean.size(); ++i) EXPECT_NEAR(mean[i], plain[i], 0.1) << i;
}

}  // namespace
}  // namespace fa_test
