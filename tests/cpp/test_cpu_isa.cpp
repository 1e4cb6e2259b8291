// cpu_flash's instruction-set builds as the API presents them: which exist, which runs, forcing one, and
// the error for one this CPU cannot run. That each build computes correctly is in the shared catalogues
// (test_backend_*.cpp run "cpu_flash@<isa>" for every build but the default).

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention_case.h"
#include "case_catalog.h"
#include "flashattn/api.h"

namespace fa_test {
namespace {

const std::vector<std::string> kKnown = {"native", "avx512_bf16", "avx512", "avx2", "generic"};

TEST(CpuIsa, ListsRunnableBuildsBestFirst) {
  const std::vector<std::string> isas = flashattn::cpu_isas();
  ASSERT_FALSE(isas.empty());
  for (const std::string& isa : isas) EXPECT_NE(std::find(kKnown.begin(), kKnown.end(), isa), kKnown.end()) << isa;
  // Preference order of kKnown, and "generic" (the fallback) last unless the build is native-only.
  for (size_t i = 1; i < isas.size(); ++i)
    EXPECT_LT(std::find(kKnown.begin(), kKnown.end(), isas[i - 1]), std::find(kKnown.begin(), kKnown.end(), isas[i]));
  if (isas.front() != "native") EXPECT_EQ(isas.back(), "generic");
}

TEST(CpuIsa, ForcingABuildIsReportedAndUndone) {
  const std::string automatic = flashattn::cpu_isa();
  AttnConfig cfg;
  cfg.batch = 1;
  cfg.heads = cfg.heads_k = 2;
  cfg.seqlen_q = cfg.seqlen_k = 40;
  cfg.head_dim = 32;
  cfg.dtype = DType::bf16;
  const AttnInputs in = make_inputs(cfg, 7);
  HostTensor out(cfg.dtype, in.q.shape()), lse(DType::f32, {cfg.batch, cfg.heads, cfg.seqlen_q});
  flashattn::FwdParams p;
  fill_call_options(p, in);
  p.q = in.q.view();
  p.k = in.k.view();
  p.v = in.v.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
  for (const std::string& isa : flashattn::cpu_isas()) {
    flashattn::set_cpu_isa(isa);
    EXPECT_EQ(flashattn::cpu_isa(), isa);
    bool seen = false;
    for (const flashattn::BackendSupport& b : flashattn::query_backends(p))
      if (b.name == "cpu_flash") {
        EXPECT_EQ(b.variant, isa);
        seen = true;
      }
    EXPECT_TRUE(seen);
  }
  flashattn::set_cpu_isa("");
  EXPECT_EQ(flashattn::cpu_isa(), automatic);
}

TEST(CpuIsa, UnknownBuildIsAClearError) {
  const std::string before = flashattn::cpu_isa();
  try {
    flashattn::set_cpu_isa("avx9000");
    FAIL() << "set_cpu_isa accepted avx9000";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::invalid_argument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("flashattn::set_cpu_isa: name: expected an instruction set of this build that this CPU runs {"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("got 'avx9000'"), std::string::npos) << msg;
  }
  EXPECT_EQ(flashattn::cpu_isa(), before);  // nothing changed
}

}  // namespace
}  // namespace fa_test
