// The C API: a valid call matches the C++ API bit for bit; a bad one returns the status code and the
// same message through flashattn_last_error.

#include <gtest/gtest.h>

#include <cstring>

#include "attention_case.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/version.h"

namespace fa_test {
namespace {

flashattn_tensor to_c(const Tensor& t) {
  flashattn_tensor c;
  std::memset(&c, 0, sizeof(c));
  c.data = t.data;
  c.dtype = int32_t(t.dtype);
  c.device_type = int32_t(t.device.type);
  c.device_index = t.device.index;
  c.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    c.shape[i] = t.shape[i];
    c.stride[i] = t.stride[i];
  }
  return c;
}

TEST(CApi, ForwardMatchesCppApi) {
  AttnConfig c;
  c.dtype = DType::bf16;
  c.causal = true;
  const AttnInputs in = make_inputs(c, 11);
  const FwdOutputs cpp = run_forward(in, "", Device::cpu());
  HostTensor out(c.dtype, in.q.shape()), lse(DType::f32, {c.batch, c.heads, c.seqlen_q});
  flashattn_fwd_params p;
  flashattn_fwd_params_init(&p);
  p.q = to_c(in.q.view());
  p.k = to_c(in.k.view());
  p.v = to_c(in.v.view());
  p.out = to_c(out.view());
  p.softmax_lse = to_c(lse.view());
  p.options.causal = 1;
  ASSERT_EQ(flashattn_forward(&p, nullptr), FLASHATTN_OK) << flashattn_last_error();
  EXPECT_EQ(std::memcmp(out.data(), cpp.out.data(), out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(lse.data(), cpp.lse.data(), lse.nbytes()), 0);
  EXPECT_STREQ(flashattn_last_error(), "");
}

TEST(CApi, BadArgumentReturnsStatusAndMessage) {
  const AttnInputs in = make_inputs(AttnConfig{}, 12);
  HostTensor out(in.cfg.dtype, in.q.shape());
  flashattn_fwd_params p;
  flashattn_fwd_params_init(&p);
  p.q = to_c(in.q.view());
  p.k = to_c(in.k.view());
  p.v = to_c(in.v.view());
  p.out = to_c(out.view());
  p.dropout_p = 2.0f;
  EXPECT_EQ(flashattn_forward(&p, nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("dropout_p: expected a probability in [0, 1), got 2"),
            std::string::npos)
      << flashattn_last_error();
  p.dropout_p = 0.0f;
  p.q.dtype = 99;
  EXPECT_EQ(flashattn_forward(&p, nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("q: expected a dtype code in [0, 4], got 99"), std::string::npos);
}

TEST(CApi, NullParams) {
  EXPECT_EQ(flashattn_forward(nullptr, nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("expected a params pointer, got NULL"), std::string::npos);
  EXPECT_EQ(flashattn_backward(nullptr, nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_EQ(flashattn_forward_kvcache(nullptr, nullptr), FLASHATTN_INVALID_ARGUMENT);
}

TEST(CApi, Version) { EXPECT_STREQ(flashattn_version(), FLASHATTN_VERSION_STRING); }

}  // namespace
}  // namespace fa_test
