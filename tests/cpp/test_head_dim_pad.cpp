// Head dims that are not multiples of 8 on backends that pad them (src/api/head_dim_pad.h). Host-side:
// which backends pad, the padded problem's shapes and strides, the workspace layout, the host copies; and
// the whole padded path (copy in, run on padded views, copy out) around cpu_flash against the fp64 oracle,
// which is what the CUDA backends run with device copies instead (their odd head dims are in the shared
// catalogue, run when a GPU is present).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "api/backends.h"
#include "api/head_dim_pad.h"
#include "api/validate.h"
#include "attention_case.h"
#include "case_catalog.h"
#include "criterion.h"
#include "kvcache_case.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

using namespace flashattn::detail;

TEST(HeadDimPad, PaddedWidths) {
  EXPECT_EQ(padded_head_dim(1), 8);
  EXPECT_EQ(padded_head_dim(8), 8);
  EXPECT_EQ(padded_head_dim(59), 64);
  EXPECT_EQ(padded_head_dim(111), 112);
  EXPECT_EQ(padded_head_dim(255), 256);
  EXPECT_EQ(padded_head_dim(256), 256);
}

// Calls that mix element sizes (FP8) cannot be padded: a backend that would need the copies declines them
// with this reason (found on the GPU: forced on an FP8 cache of head dim 1, cuda_sm90 raised an internal
// error instead of declining).
TEST(HeadDimPad, MixedElementSizesAreDeclinedNotPadded) {
  FwdProblem f;
  f.dtype = DType::fp8_e4m3;  // out bf16
  EXPECT_NE(pad_unsupported_reason(f).find("fp8_e4m3"), std::string::npos);
  f.dtype = DType::bf16;
  EXPECT_EQ(pad_unsupported_reason(f), "");
  KVCacheProblem k;
  k.dtype = DType::f16;
  k.cache_dtype = DType::fp8_e4m3;
  EXPECT_NE(pad_unsupported_reason(k).find("not implemented"), std::string::npos);
  k.cache_dtype = DType::f16;
  EXPECT_EQ(pad_unsupported_reason(k), "");
}

TEST(HeadDimPad, WhichBackendsPad) {
  const Backend needs_multiple_of_8{};  // a table that does not declare any_head_dim
  EXPECT_TRUE(needs_head_dim_pad(needs_multiple_of_8, 59));
  EXPECT_TRUE(needs_head_dim_pad(needs_multiple_of_8, 1));
  EXPECT_FALSE(needs_head_dim_pad(needs_multiple_of_8, 64));  // no copy when already a multiple of 8
  for (const Backend& b : registry()) {
    // The CPU backends run any width natively; every CUDA backend runs odd widths padded (cuda_fp8's bf16
    // call is padded when it is dispatched).
    EXPECT_EQ(needs_head_dim_pad(b, 59), b.device == flashattn::DeviceType::cuda && std::string(b.name) != "cuda_fp8")
        << b.name;
    EXPECT_FALSE(needs_head_dim_pad(b, 128)) << b.name;
  }
}

// A validated problem of `cfg` whose tensors live in `in` (host).
struct HostCall {
  AttnInputs in;
  HostTensor out, lse, dq, dk, dv;
  flashattn::BwdParams p;
  explicit HostCall(const AttnConfig& cfg) : in(make_inputs(cfg, 7)) {
    out = HostTensor(cfg.dtype, in.q.shape());
    lse = cfg.varlen() ? HostTensor(DType::f32, {cfg.heads, in.q.shape()[0]})
                       : HostTensor(DType::f32, {cfg.batch, cfg.heads, cfg.seqlen_q});
    dq = HostTensor(cfg.dtype, in.q.shape());
    dk = HostTensor(cfg.dtype, in.k.shape());
    dv = HostTensor(cfg.dtype, in.v.shape());
    fill_call_options(p, in);
    p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.out = out.view(), p.softmax_lse = lse.view();
    p.dout = in.dout.view(), p.dq = dq.view(), p.dk = dk.view(), p.dv = dv.view();
    p.cu_seqlens_q = in.cu_seqlens_q.view(), p.cu_seqlens_k = in.cu_seqlens_k.view();
  }
};

AttnConfig odd_config(bool varlen) {
  AttnConfig c;
  c.dtype = DType::bf16;
  c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 7, c.heads = 4, c.heads_k = 2, c.head_dim = 13;
  if (varlen) c.varlen_q = {2, 3}, c.varlen_k = {4, 3};
  return c;
}

// Regions are kPadAlignment-aligned, in order, without overlap, and fill the workspace.
void expect_packed(const PadPlan& plan) {
  size_t end = 0;
  const size_t elem = flashattn::dtype_size(plan.dtype);
  for (const PadRegion& r : plan.regions) {
    EXPECT_EQ(r.offset % kPadAlignment, 0u);
    EXPECT_GE(r.offset, end);
    end = r.offset + size_t(r.elements(plan.padded)) * elem;
  }
  EXPECT_EQ(plan.workspace_bytes, (end + kPadAlignment - 1) / kPadAlignment * kPadAlignment);
}

TEST(HeadDimPad, DenseForwardPlan) {
  HostCall call(odd_config(false));
  const FwdProblem pr = make_fwd_problem(call.p);
  const PaddedCall<FwdProblem> padded = pad_call(pr);
  const PadPlan& plan = padded.plan;
  EXPECT_EQ(plan.head_dim, 13);
  EXPECT_EQ(plan.padded, 16);
  EXPECT_EQ(padded.problem.head_dim, 16);
  // The caller's default scale: 1/sqrt(13), not 1/sqrt(16).
  EXPECT_FLOAT_EQ(padded.problem.score.softmax_scale, float(1.0 / std::sqrt(13.0)));
  ASSERT_EQ(plan.regions.size(), 4u);  // q, k, v in; out out
  const void* callers[] = {call.in.q.data(), call.in.k.data(), call.in.v.data(), call.out.data()};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(plan.regions[i].caller.ptr, callers[i]);
    EXPECT_EQ(plan.regions[i].copy_in, i < 3);
    EXPECT_EQ(plan.regions[i].copy_out, i == 3);
  }
  EXPECT_EQ(plan.regions[1].batches, 2);
  EXPECT_EQ(plan.regions[1].rows, 7);
  EXPECT_EQ(plan.regions[1].heads, 2);
  // Dense padded strides; nothing bound yet.
  EXPECT_EQ(padded.problem.q.ptr, nullptr);
  EXPECT_EQ(padded.problem.q.head_stride, 16);
  EXPECT_EQ(padded.problem.q.row_stride, 4 * 16);
  EXPECT_EQ(padded.problem.q.batch_stride, 5 * 4 * 16);
  EXPECT_EQ(padded.problem.k.batch_stride, 7 * 2 * 16);
  expect_packed(plan);
}

TEST(HeadDimPad, VarlenPlanKeepsRowsAbsolute) {
  HostCall call(odd_config(true));
  const PaddedCall<FwdProblem> padded = pad_call(make_fwd_problem(call.p));
  EXPECT_EQ(padded.plan.regions[0].batches, 1);
  EXPECT_EQ(padded.plan.regions[0].rows, 5);  // total_q
  EXPECT_EQ(padded.plan.regions[1].rows, 7);  // total_k
  EXPECT_EQ(padded.problem.q.batch_stride, 0);
  EXPECT_EQ(padded.problem.k.batch_stride, 0);
  EXPECT_EQ(padded.problem.cu_seqlens_q, make_fwd_problem(call.p).cu_seqlens_q);
}

TEST(HeadDimPad, BackwardPlan) {
  HostCall call(odd_config(false));
  const PaddedCall<BwdProblem> padded = pad_call(make_bwd_problem(call.p));
  const PadPlan& plan = padded.plan;
  ASSERT_EQ(plan.regions.size(), 8u);  // q, k, v, out, dout in; dq, dk, dv out
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(plan.regions[i].copy_in, i < 5) << i;
    EXPECT_EQ(plan.regions[i].copy_out, i >= 5) << i;
  }
  EXPECT_EQ(plan.regions[7].caller.ptr, call.dv.data());
  expect_packed(plan);
  PaddedCall<BwdProblem> bound = padded;
  std::vector<char> workspace(plan.workspace_bytes);
  bind_workspace(bound, workspace.data());
  EXPECT_EQ(bound.problem.dout.ptr, workspace.data() + plan.regions[4].offset);
  EXPECT_EQ(bound.problem.dv.ptr, workspace.data() + plan.regions[7].offset);
}

TEST(HeadDimPad, KVCachePlanCopiesAnAppendedCacheBack) {
  for (bool append : {false, true})
    for (int64_t page : {0, 4}) {
      KVConfig c;
      c.head_dim = 5;
      c.capacity = 16;
      c.cache_seqlens = {3, 0, 9};
      c.page_size = page;
      c.seqlen_new = append ? 2 : 0;
      const KVInputs in = make_kv_inputs(c, 3);
      KVCacheProblem pr;
      run_kvcache_via(in, "cpu_reference", flashattn::Device::cpu(),
                      [&](const flashattn::KVCacheParams& p) { pr = make_kvcache_problem(p); });
      const PaddedCall<KVCacheProblem> padded = pad_call(pr);
      const PadPlan& plan = padded.plan;
      // q in, out out, [k_new, v_new in], k_cache, v_cache in (and out when appended to)
      ASSERT_EQ(plan.regions.size(), append ? 6u : 4u);
      const PadRegion& kc = plan.regions[plan.regions.size() - 2];
      EXPECT_TRUE(kc.copy_in);
      EXPECT_EQ(kc.copy_out, append);
      EXPECT_EQ(kc.batches, page ? in.k_cache.shape()[0] : 3);  // blocks, or cache rows
      EXPECT_EQ(kc.rows, page ? page : 16);
      EXPECT_EQ(padded.problem.cache.k_head_stride, 8);
      EXPECT_EQ(padded.problem.cache.k_row_stride, c.heads_k * 8);
      EXPECT_EQ(padded.problem.cache.block_table, pr.cache.block_table);
      expect_packed(plan);
    }
}

// A (2, 3, 2, 5) f16 region inside a wider buffer of 100: head stride 7, row stride 16, batch stride 50.
struct StridedRegion {
  std::vector<uint16_t> caller = std::vector<uint16_t>(100);
  PadPlan plan;
  PadRegion r;
  StridedRegion() {
    for (size_t i = 0; i < caller.size(); ++i) caller[i] = uint16_t(i + 1);
    plan.dtype = DType::f16, plan.head_dim = 5, plan.padded = 8;
    r.caller = RowsView{caller.data(), 50, 16, 7};
    r.batches = 2, r.rows = 3, r.heads = 2;
  }
  static constexpr int64_t kPadded = 2 * 3 * 2 * 8;
};

// The padded copy holds the region's values and zero tails; copying (modified) values back writes exactly
// the region's elements of a zeroed buffer.
void check_round_trip(const StridedRegion& s, std::vector<uint16_t> dense, std::vector<uint16_t>& back,
                      const std::function<void(const std::vector<uint16_t>&)>& unpad) {
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 8; ++d) {
          const uint16_t want = d < 5 ? s.caller[size_t(b * 50 + i * 16 + h * 7 + d)] : 0;
          ASSERT_EQ(dense[size_t(((b * 3 + i) * 2 + h) * 8 + d)], want) << b << " " << i << " " << h << " " << d;
        }
  for (uint16_t& e : dense) e = uint16_t(e ^ 0x8000u);
  unpad(dense);
  int written = 0;
  for (size_t i = 0; i < back.size(); ++i)
    if (back[i] != 0) {
      EXPECT_EQ(back[i], uint16_t(s.caller[i] ^ 0x8000u)) << i;
      ++written;
    }
  EXPECT_EQ(written, 2 * 3 * 2 * 5);
}

TEST(HeadDimPad, HostCopiesRoundTripStridedViews) {
  StridedRegion s;
  auto copier = make_host_pad_copier();
  uint16_t* dense = static_cast<uint16_t*>(copier->allocate(StridedRegion::kPadded * 2));
  copier->pad(s.plan, s.r, dense);
  std::vector<uint16_t> back(100, 0);
  check_round_trip(s, std::vector<uint16_t>(dense, dense + StridedRegion::kPadded), back,
                   [&](const std::vector<uint16_t>& modified) {
                     std::copy(modified.begin(), modified.end(), dense);
                     PadRegion out = s.r;
                     out.caller.ptr = back.data();
                     copier->unpad(s.plan, out, dense);
                   });
}

#if defined(FLASHATTN_WITH_CUDA)
// The CUDA copier on the same strided region in device memory (skipped without a GPU).
TEST(HeadDimPad, CudaCopiesRoundTripStridedViews) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  StridedRegion s;
  HostTensor host(DType::f16, {100});
  std::memcpy(host.data(), s.caller.data(), 200);
  DeviceTensor caller(host, flashattn::Device::cuda(0));
  PadRegion r = s.r;
  r.caller.ptr = caller.view().data;
  auto copier = make_cuda_pad_copier(flashattn::Device::cuda(0), nullptr);
  void* dense = copier->allocate(StridedRegion::kPadded * 2);
  copier->pad(s.plan, r, dense);
  std::vector<uint16_t> got(StridedRegion::kPadded);
  ASSERT_EQ(cudaMemcpy(got.data(), dense, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  HostTensor zeros(DType::f16, {100});
  zeros.fill(0.0);
  DeviceTensor back_dev(zeros, flashattn::Device::cuda(0));
  std::vector<uint16_t> back(100, 0);
  check_round_trip(s, got, back, [&](const std::vector<uint16_t>& modified) {
    ASSERT_EQ(cudaMemcpy(dense, modified.data(), modified.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    PadRegion out = r;
    out.caller.ptr = back_dev.view().data;
    copier->unpad(s.plan, out, dense);
    const HostTensor b = back_dev.download();
    std::memcpy(back.data(), b.data(), 200);
  });
}
#endif

// cpu_flash run on padded copies, as a backend without any_head_dim would be: the padded problem it
// receives has head_dim rounded up, and results come back at the caller's width.
template <typename Problem, typename Run>
void run_padded_on_host(const Problem& pr, Run&& run) {
  auto copier = make_host_pad_copier();
  run_padded(pr, *copier, [&](const Problem& padded) {
    ASSERT_EQ(padded.head_dim, padded_head_dim(pr.head_dim));
    run(padded);
  });
}

std::vector<AttnConfig> odd_cases(const std::vector<AttnConfig>& all) {
  std::vector<AttnConfig> out;
  for (const AttnConfig& c : all)
    if (c.head_dim % 8 != 0 && !c.paged_or_seqused()) out.push_back(c);
  return out;
}

TEST(HeadDimPad, PaddedForwardMatchesReference) {
  const std::vector<AttnConfig> cases = odd_cases(forward_cases());
  ASSERT_GE(cases.size(), 24u);
  for (size_t i = 0; i < cases.size(); i += 3) {  // a third of them: the path is the same for all
    SCOPED_TRACE(cases[i].name());
    const AttnInputs in = make_inputs(cases[i], 300 + i);
    const FwdOutputs got = run_forward_via(in, "", flashattn::Device::cpu(), [](const flashattn::FwdParams& p) {
      run_padded_on_host(make_fwd_problem(p),
                         [](const FwdProblem& padded) { cpu_flash_backend().run_fwd(padded, nullptr); });
    });
    expect_forward_within_criterion(got, reference_forward(in), naive_lowp(in, false), cases[i].dtype);
  }
}

TEST(HeadDimPad, PaddedBackwardMatchesReference) {
  const std::vector<AttnConfig> cases = odd_cases(backward_cases());
  ASSERT_GE(cases.size(), 24u);
  for (size_t i = 0; i < cases.size(); i += 3) {
    SCOPED_TRACE(cases[i].name());
    const AttnInputs in = make_inputs(cases[i], 700 + i);
    const FwdOutputs fwd = run_forward(in, "cpu_flash", flashattn::Device::cpu());
    const BwdOutputs got =
        run_backward_via(in, fwd, "", flashattn::Device::cpu(), false, [](const flashattn::BwdParams& p) {
          run_padded_on_host(make_bwd_problem(p),
                             [](const BwdProblem& padded) { cpu_flash_backend().run_bwd(padded, nullptr); });
        });
    expect_backward_within_criterion(got, reference_backward(in), naive_lowp(in, true), cases[i].dtype);
  }
}

TEST(HeadDimPad, PaddedKVCacheMatchesReferenceAndAppendsIntoTheCallersCache) {
  int ran = 0;
  for (const KVConfig& c : kvcache_cases()) {
    if (c.head_dim % 8 == 0) continue;
    SCOPED_TRACE(c.name());
    const KVInputs in = make_kv_inputs(c, 40 + uint64_t(ran++));
    const KVOracle oracle = kv_oracle(in);
    const KVOutputs got = run_kvcache_via(in, "", flashattn::Device::cpu(), [](const flashattn::KVCacheParams& p) {
      run_padded_on_host(make_kvcache_problem(p),
                         [](const KVCacheProblem& padded) { cpu_flash_backend().run_kvcache(padded, nullptr); });
    });
    EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, c.dtype));
    EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
    // Without rotary the appended rows are copies: exact. With rotary within a rounding unit.
    const double eps = c.dtype == DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    for (int64_t e = 0; e < got.k_cache.numel(); ++e) {
      const double r = oracle.appended.k_cache.get(e), tol = c.rotary_dim ? eps * std::max(1.0, std::fabs(r)) : 0.0;
      ASSERT_LE(std::fabs(got.k_cache.get(e) - r), tol) << "k_cache[" << e << "]";
    }
    EXPECT_TRUE(bitwise_equal(got.v_cache, oracle.appended.v_cache));
  }
  EXPECT_GE(ran, 5);
}

}  // namespace
}  // namespace fa_test
