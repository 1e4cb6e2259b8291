// The C API: a valid call matches the C++ API bit for bit; a bad one returns the status code and the
// same message through flashattn_last_error.

#include <gtest/gtest.h>

#include <cstring>

#include "attention_case.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/version.h"
#include "gpu_test.h"
#include "kvcache_case.h"

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

// A paged varlen forward with seqused_k (vLLM's call) through the C API: the C++ API's bits.
TEST(CApi, PagedVarlenForwardMatchesCppApi) {
  AttnConfig c;
  c.dtype = DType::f16;
  c.head_dim = 59;
  c.varlen_q = {1, 12, 3};
  c.varlen_k = {20, 12, 7};
  c.page_size = 4;
  c.seqused_k = true;
  c.causal = true;
  const AttnInputs in = make_inputs(c, 13);
  const FwdOutputs cpp = run_forward(in, "", Device::cpu());
  HostTensor out(c.dtype, in.q.shape()), lse(DType::f32, {c.heads, in.q.shape()[0]});
  flashattn_fwd_params p;
  flashattn_fwd_params_init(&p);
  p.q = to_c(in.q.view());
  p.k = to_c(in.call_k.view());
  p.v = to_c(in.call_v.view());
  p.out = to_c(out.view());
  p.softmax_lse = to_c(lse.view());
  p.cu_seqlens_q = to_c(in.cu_seqlens_q.view());
  p.cu_seqlens_k = to_c(in.call_cu_seqlens_k.view());
  p.max_seqlen_q = in.max_seqlen_q;
  p.max_seqlen_k = in.call_max_seqlen_k;
  p.block_table = to_c(in.block_table.view());
  p.seqused_k = to_c(in.seqused_k.view());
  p.options.causal = 1;
  ASSERT_EQ(flashattn_forward(&p, nullptr), FLASHATTN_OK) << flashattn_last_error();
  EXPECT_EQ(std::memcmp(out.data(), cpp.out.data(), out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(lse.data(), cpp.lse.data(), lse.nbytes()), 0);
  // Backward refuses a block table.
  flashattn_bwd_params b;
  flashattn_bwd_params_init(&b);
  b.fwd = p;
  EXPECT_EQ(flashattn_backward(&b, nullptr), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("block_table: expected none"), std::string::npos)
      << flashattn_last_error();
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
  // The initialisers ignore NULL (they wrote through it before).
  flashattn_fwd_params_init(nullptr);
  flashattn_bwd_params_init(nullptr);
  flashattn_kvcache_params_init(nullptr);
}

// A caller's workspace_alloc reaches the GPU kernels: asked once for a split decode call (with its
// context), and the result is the C++ API's bit for bit.
TEST(CApi, KvcacheWorkspaceAlloc) {
  FA_SKIP_WITHOUT_GPU("cuda_decode through the C API");
  KVConfig c;
  c.dtype = DType::bf16;
  c.batch = 2;
  c.heads = 32;
  c.heads_k = 8;
  c.head_dim = 128;
  c.capacity = 4096;
  c.cache_seqlens = {4000, 1234};
  c.num_splits = 8;
  const KVInputs in = make_kv_inputs(c, 91);
  const KVOutputs cpp = run_kvcache(in, "cuda_decode", Device::cuda(0));

  const Device d = Device::cuda(0);
  DeviceTensor q(in.q, d), k_cache(in.k_cache, d), v_cache(in.v_cache, d), lens(in.cache_seqlens, d);
  HostTensor out_host(c.dtype, in.q.shape()), lse_host(DType::f32, {c.batch, c.heads, c.seqlen_q});
  out_host.poison();
  lse_host.poison();
  DeviceTensor out(out_host, d), lse(lse_host, d);
  struct Arena {
    DeviceTensor memory{HostTensor(DType::f32, {int64_t(16) << 20}), Device::cuda(0)};  // 64 MB
    int calls = 0;
  } arena;
  flashattn_kvcache_params p;
  flashattn_kvcache_params_init(&p);
  p.q = to_c(q.view());
  p.k_cache = to_c(k_cache.view());
  p.v_cache = to_c(v_cache.view());
  p.cache_seqlens = to_c(lens.view());
  p.out = to_c(out.view());
  p.softmax_lse = to_c(lse.view());
  p.num_splits = c.num_splits;
  p.options.backend = "cuda_decode";
  p.workspace_alloc = [](size_t bytes, void* context) -> void* {
    auto* a = static_cast<Arena*>(context);
    ++a->calls;
    return bytes <= (size_t(64) << 20) ? a->memory.view().data : nullptr;
  };
  p.workspace_alloc_context = &arena;
  ASSERT_EQ(flashattn_forward_kvcache(&p, nullptr), FLASHATTN_OK) << flashattn_last_error();
  device_synchronize(d);
  EXPECT_EQ(arena.calls, 1);
  const HostTensor got_out = out.download(), got_lse = lse.download();
  EXPECT_TRUE(bitwise_equal(got_out, cpp.out));
  EXPECT_TRUE(bitwise_equal(got_lse, cpp.lse));
}

TEST(CApi, Version) { EXPECT_STREQ(flashattn_version(), FLASHATTN_VERSION_STRING); }

}  // namespace
}  // namespace fa_test
