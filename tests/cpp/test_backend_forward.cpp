// Every backend's forward (out and LSE) against the fp64 oracle with flash-attn's criterion, over the
// shared case catalogue.

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
  static const std::vector<AttnConfig> c = forward_cases();
  return c;
}

class BackendForward : public testing::TestWithParam<BackendCase> {};

TEST_P(BackendForward, MatchesReference) {
  const auto& [backend, index] = GetParam();
  FA_SKIP_IF_DEVICE_MISSING(backend);
  const BackendUnderTest under_test(backend);
  const AttnConfig& cfg = cases()[size_t(index)];
  const AttnInputs in = make_inputs(cfg, 1000 + uint64_t(index));
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  FwdOutputs got;
  try {
    got = run_forward(in, under_test.name(), device_of(backend));
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
  expect_forward_within_criterion(got, ref, naive, cfg.dtype);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BackendForward,
                         testing::Combine(testing::ValuesIn(tested_backends()),
                                          testing::Range(0, int(forward_cases().size()))),
                         [](const testing::TestParamInfo<BackendCase>& info) {
                           const int index = std::get<1>(info.param);
                           return backend_case_name(std::get<0>(info.param), cases()[size_t(index)], index);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendForward);

}  // namespace
}  // namespace fa_test
