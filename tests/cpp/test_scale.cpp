// Scale on every backend (the CPU ones always, CUDA ones when a device is visible): varlen batches of
// thousands of sequences, most of them a few tokens long and some empty, as a packed-sequence training
// step produces them. Every sequence boundary is a tile edge for the kernels, and per-sequence state
// (cu_seqlens offsets, split counts, workspace rows) is indexed thousands of times. docs/reliability.md.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "attention_case.h"
#include "backend_params.h"
#include "criterion.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

std::vector<std::string> all_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) out.push_back(b.name);
  return out;
}

class Scale : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { FA_SKIP_IF_DEVICE_MISSING(GetParam()); }
  Device device() const { return device_of(GetParam()); }
};

// `count` sequences with query lengths in [0, max_q] and key lengths in [0, max_k], about one in eight
// of each empty.
AttnConfig many_sequences(int64_t count, int64_t max_q, int64_t max_k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> lq(0, max_q), lk(0, max_k);
  AttnConfig c;
  c.dtype = DType::bf16;
  c.heads = 4, c.heads_k = 2, c.head_dim = 32;
  for (int64_t i = 0; i < count; ++i) {
    c.varlen_q.push_back(lq(rng));
    c.varlen_k.push_back(lk(rng));
  }
  return c;
}

TEST_P(Scale, VarlenWithThousandsOfSequences) {
  AttnConfig plain = many_sequences(3000, 7, 9, 1);
  AttnConfig causal = many_sequences(2048, 12, 12, 2);
  causal.causal = true;
  causal.dtype = DType::f16;
  for (const AttnConfig& cfg : {plain, causal}) {
    SCOPED_TRACE(cfg.causal ? "causal, 2048 sequences" : "full, 3000 sequences");
    const AttnInputs in = make_inputs(cfg, 21);
    FwdOutputs fwd;
    BwdOutputs bwd;
    try {
      fwd = run_forward(in, GetParam(), device());
      bwd = run_backward(in, fwd, GetParam(), device());
    } catch (const flashattn::Error& e) {
      if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
      throw;
    }
    const FwdOutputs ref = reference_forward(in);
    const BwdOutputs ref_bwd = reference_backward(in);
    const NaiveOutputs naive = naive_lowp(in, true);
    expect_forward_within_criterion(fwd, ref, naive, cfg.dtype);
    expect_backward_within_criterion(bwd, ref_bwd, naive, cfg.dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Scale, testing::ValuesIn(all_backends()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace fa_test
