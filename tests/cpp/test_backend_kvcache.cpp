// Every backend's forward_kvcache against the oracle: output and LSE with flash-attn's criterion, and
// the cache contents after the in-place append (exactly without rotary, within one unit of rounding
// with rotary since the rotation may be computed at different precisions before rounding).

#include <gtest/gtest.h>

#include <cmath>

#include "backend_params.h"
#include "criterion.h"
#include "kvcache_case.h"

namespace fa_test {
namespace {

const std::vector<KVConfig>& cases() {
  static const std::vector<KVConfig> c = kvcache_cases();
  return c;
}

testing::AssertionResult caches_match(const char* what, const HostTensor& got, const HostTensor& ref, bool rotary) {
  const double eps = got.dtype() == DType::bf16  ? std::ldexp(1.0, -7)
                     : got.dtype() == DType::f16 ? std::ldexp(1.0, -10)
                                                 : 1e-6;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.get(i), r = ref.get(i);
    const double tol = rotary ? eps * std::max(1.0, std::fabs(r)) : 0.0;
    if (!(std::fabs(g - r) <= tol))
      return testing::AssertionFailure() << what << "[" << i << "] = " << g << ", reference " << r;
  }
  return testing::AssertionSuccess();
}

class BackendKVCache : public testing::TestWithParam<BackendCase> {};

TEST_P(BackendKVCache, MatchesReference) {
  const std::string& backend = std::get<0>(GetParam());
  const int index = std::get<1>(GetParam());
  FA_SKIP_IF_DEVICE_MISSING(backend);
  const BackendUnderTest under_test(backend);
  const KVConfig& cfg = cases()[size_t(index)];
  const KVInputs in = make_kv_inputs(cfg, 9000 + uint64_t(index));
  const KVOracle oracle = kv_oracle(in);
  KVOutputs got;
  try {
    got = run_kvcache(in, under_test.name(), device_of(backend));
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
  EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, cfg.dtype));
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
  EXPECT_TRUE(caches_match("k_cache", got.k_cache, oracle.appended.k_cache, cfg.rotary_dim > 0));
  EXPECT_TRUE(caches_match("v_cache", got.v_cache, oracle.appended.v_cache, false));
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BackendKVCache,
                         testing::Combine(testing::ValuesIn(tested_backends()),
                                          testing::Range(0, int(kvcache_cases().size()))),
                         [](const testing::TestParamInfo<BackendCase>& info) {
                           const int index = std::get<1>(info.param);
                           std::string s = std::get<0>(info.param) + "_" + std::to_string(index) + "_" +
                                           cases()[size_t(index)].name();
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendKVCache);

// The reference's append writes v_new exactly at positions cache_seqlens[b] + t of sequence b (through
// the page table or cache_batch_idx) and leaves every other cache element untouched.
TEST(ReferenceKVCache, AppendWritesExactlyTheNewPositions) {
  for (size_t i = 0; i < cases().size(); ++i) {
    const KVConfig& c = cases()[i];
    if (!c.seqlen_new) continue;
    const KVInputs in = make_kv_inputs(c, 200 + i);
    const KVOutputs o = run_kvcache(in, "cpu_reference", flashattn::Device::cpu());
    HostTensor expect = in.v_cache;
    const int64_t D = c.head_dim, Hk = c.heads_k;
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t before = c.scalar_seqlens ? c.cache_seqlens[0] : c.cache_seqlens[size_t(b)];
      for (int64_t t = 0; t < c.seqlen_new; ++t)
        for (int64_t hk = 0; hk < Hk; ++hk) {
          const int64_t pos = before + t;
          int64_t row;
          if (c.page_size) {
            const int64_t block = in.block_table.i32()[b * (c.capacity / c.page_size) + pos / c.page_size];
            row = block * c.page_size + pos % c.page_size;
          } else {
            row = (c.batch_idx ? in.cache_batch_idx.i32()[b] : b) * c.capacity + pos;
          }
          for (int64_t d = 0; d < D; ++d)
            expect.set((row * Hk + hk) * D + d, in.v_new.get(((b * c.seqlen_new + t) * Hk + hk) * D + d));
        }
    }
    EXPECT_TRUE(caches_match("v_cache", o.v_cache, expect, false)) << c.name();
  }
}

// The reference itself against the independent oracle (which re-derives positions and rotation).
TEST(ReferenceKVCache, AgreesWithGatheredOracle) {
  for (size_t i = 0; i < cases().size(); ++i) {
    const KVInputs in = make_kv_inputs(cases()[i], 100 + i);
    const KVOracle o = kv_oracle(in);
    EXPECT_TRUE(within_criterion("out", o.appended.out, o.out, o.naive_out, cases()[i].dtype)) << cases()[i].name();
    EXPECT_TRUE(within_criterion("lse", o.appended.lse, o.lse, o.naive_lse, DType::f32)) << cases()[i].name();
  }
}

}  // namespace
}  // namespace fa_test
