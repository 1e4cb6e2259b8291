// A small set of cases per CUDA backend, forward and (where supported) backward: the reduced suite that
// compute-sanitizer (memcheck, racecheck, synccheck, initcheck) runs in scripts/gpu-check.sh.

#include <gtest/gtest.h>

#include "backend_params.h"
#include "case_catalog.h"
#include "criterion.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

std::vector<std::string> cuda_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends())
    if (b.device == flashattn::DeviceType::cuda) out.push_back(b.name);
  return out;
}

const std::vector<AttnConfig>& cases() {
  static const std::vector<AttnConfig> c = smoke_cases();
  return c;
}

class GpuSmoke : public testing::TestWithParam<BackendCase> {};

TEST_P(GpuSmoke, ForwardAndBackward) {
  const std::string& backend = std::get<0>(GetParam());
  FA_SKIP_IF_DEVICE_MISSING(backend);
  const AttnConfig& cfg = cases()[size_t(std::get<1>(GetParam()))];
  const AttnInputs in = make_inputs(cfg, 31 + uint64_t(std::get<1>(GetParam())));
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, true);
  FwdOutputs fwd;
  try {
    fwd = run_forward(in, backend, flashattn::Device::cuda(0));
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
  expect_forward_within_criterion(fwd, ref, naive, cfg.dtype);
  BwdOutputs got;
  try {
    got = run_backward(in, fwd, backend, flashattn::Device::cuda(0));
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) return;  // forward-only backend
    throw;
  }
  const BwdOutputs bref = reference_backward(in);
  expect_backward_within_criterion(got, bref, naive, cfg.dtype);
}

INSTANTIATE_TEST_SUITE_P(Smoke, GpuSmoke,
                         testing::Combine(testing::ValuesIn(cuda_backends()),
                                          testing::Range(0, int(smoke_cases().size()))),
                         [](const testing::TestParamInfo<BackendCase>& info) {
                           const int index = std::get<1>(info.param);
                           return backend_case_name(std::get<0>(info.param), cases()[size_t(index)], index);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuSmoke);

}  // namespace
}  // namespace fa_test
