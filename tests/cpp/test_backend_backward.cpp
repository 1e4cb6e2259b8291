// Every backend's backward (dq, dk, dv) against the fp64 oracle with flash-attn's criterion. The
// backend's own forward produces the out and LSE its backward consumes, as in training.

#include <gtest/gtest.h>

#include "attention_case.h"
#include "backend_params.h"
#include "case_catalog.h"
#include "criterion.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

const std::vector<AttnConfig>& cases() {
  static const std::vector<AttnConfig> c = backward_cases();
  return c;
}

class BackendBackward : public testing::TestWithParam<BackendCase> {};

TEST_P(BackendBackward, MatchesReference) {
  const auto& [backend, index] = GetParam();
  FA_SKIP_IF_DEVICE_MISSING(backend);
  const BackendUnderTest under_test(backend);
  const AttnConfig& cfg = cases()[size_t(index)];
  const AttnInputs in = make_inputs(cfg, 5000 + uint64_t(index));
  const BwdOutputs ref = reference_backward(in);
  const NaiveOutputs naive = naive_lowp(in, true);
  const flashattn::Device dev = device_of(backend);
  BwdOutputs got;
  try {
    const FwdOutputs fwd = run_forward(in, under_test.name(), dev);
    got = run_backward(in, fwd, under_test.name(), dev);
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
  expect_backward_within_criterion(got, ref, naive, cfg.dtype);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BackendBackward,
                         testing::Combine(testing::ValuesIn(tested_backends()),
                                          testing::Range(0, int(backward_cases().size()))),
                         [](const testing::TestParamInfo<BackendCase>& info) {
                           const int index = std::get<1>(info.param);
                           return backend_case_name(std::get<0>(info.param), cases()[size_t(index)], index);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendBackward);

}  // namespace
}  // namespace fa_test
