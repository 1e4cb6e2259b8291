// Paged K/V and seqused_k in the varlen forward. The shared catalogue (case_catalog.cpp) runs every
// backend's paged calls against the fp64 oracle on contiguous keys; here: the reference's own paged path
// reads exactly the keys of its contiguous path, and which backends take or decline such calls.

#include <gtest/gtest.h>

#include "api/backend.h"
#include "api/validate.h"
#include "attention_case.h"
#include "case_catalog.h"

namespace fa_test {
namespace {

using namespace flashattn::detail;

std::vector<AttnConfig> paged_cases() {
  std::vector<AttnConfig> out;
  for (const AttnConfig& c : forward_cases())
    if (c.paged_or_seqused()) out.push_back(c);
  return out;
}

TEST(PagedVarlen, CatalogueHasChunkedPrefill) {
  // A batch mixing single-token decode steps and 2k-token prefills, paged, in one call.
  bool found = false;
  for (const AttnConfig& c : paged_cases()) {
    const auto [lo, hi] = std::minmax_element(c.varlen_q.begin(), c.varlen_q.end());
    found = found || (c.page_size > 0 && *lo == 1 && *hi >= 2048);
  }
  EXPECT_TRUE(found);
}

// The oracle of the catalogue is cpu_reference on contiguous keys; its paged path must give the same bits.
TEST(PagedVarlen, ReferenceReadsTheSameKeysPagedAndContiguous) {
  const std::vector<AttnConfig> cases = paged_cases();
  ASSERT_GE(cases.size(), 10u);
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].varlen_q.size() == 5 && cases[i].varlen_q[1] == 2048) continue;  // the long one: catalogue only
    SCOPED_TRACE(cases[i].name());
    const AttnInputs in = make_inputs(cases[i], 60 + i);
    const FwdOutputs paged = run_forward(in, "cpu_reference", flashattn::Device::cpu());
    const FwdOutputs contiguous = run_forward(contiguous_keys(in), "cpu_reference", flashattn::Device::cpu());
    EXPECT_TRUE(bitwise_equal(paged.out, contiguous.out));
    EXPECT_TRUE(bitwise_equal(paged.lse, contiguous.lse));
  }
}

// A backend whose table does not declare paged_varlen_fwd declines with a reason (query_backends shows
// it); the CUDA backends do so until their kernels read block tables.
TEST(PagedVarlen, BackendsWithoutTheFeatureDecline) {
  AttnConfig c;
  c.varlen_q = {3, 1};
  c.varlen_k = {9, 4};
  c.head_dim = 16;
  for (auto [page, seqused] : {std::pair{int64_t(4), false}, std::pair{int64_t(0), true}}) {
    c.page_size = page;
    c.seqused_k = seqused;
    const AttnInputs in = make_inputs(c, 5);
    FwdProblem pr;
    run_forward_via(in, "", flashattn::Device::cpu(), [&](const flashattn::FwdParams& p) { pr = make_fwd_problem(p); });
    const std::string why = capability_reason(Backend{}, pr);
    EXPECT_NE(why.find(page ? "block_table" : "seqused_k"), std::string::npos) << why;
    for (const Backend& b : registry())
      EXPECT_EQ(capability_reason(b, pr).empty(), b.device == flashattn::DeviceType::cpu) << b.name;
  }
}

}  // namespace
}  // namespace fa_test
