// Numerical edge cases on every backend (the CPU ones always, CUDA ones when a device is visible), as
// defined in docs/reliability.md: NaN and Inf propagation, fully masked rows, extreme softmax scales and
// softcaps, f16 inputs whose products overflow f16, and empty shapes. Each case runs through the same
// harness as the catalogue tests and compares against the fp64 reference where values are defined.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "api/backend.h"
#include "api/validate.h"
#include "attention_case.h"
#include "backend_params.h"
#include "criterion.h"
#include "kvcache_case.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::string> all_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) out.push_back(b.name);
  return out;
}

// Runs `call`, or skips the test when the backend declares the case unsupported (a CUDA kernel without
// the dtype or feature); any other error fails the test.
#define FA_RUN_OR_SKIP(result, call)                                              \
  do {                                                                            \
    try {                                                                         \
      result = call;                                                              \
    } catch (const flashattn::Error& e) {                                         \
      if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what(); \
      throw;                                                                      \
    }                                                                             \
  } while (0)

// The backward of `backend`, or nothing when the backend has none for this call (cuda_naive and
// cuda_fa1_simt are forward-only). Tests check the forward before calling this, so a forward-only
// backend still has its forward checked instead of skipping the whole test.
std::optional<BwdOutputs> backward_if_supported(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend,
                                                Device device) {
  try {
    return run_backward(in, fwd, backend, device);
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) return std::nullopt;
    throw;
  }
}

// Flat index of element (b, i, h, d) of a dense (B, S, H, D) tensor.
int64_t at(const HostTensor& t, int64_t b, int64_t i, int64_t h, int64_t d) {
  const auto& s = t.shape();
  return ((b * s[1] + i) * s[2] + h) * s[3] + d;
}
// Flat index of LSE (b, h, i) of a dense (B, H, Sq) tensor.
int64_t lse_at(const HostTensor& t, int64_t b, int64_t h, int64_t i) {
  const auto& s = t.shape();
  return (b * s[1] + h) * s[2] + i;
}

AttnConfig small_causal(DType dtype) {
  AttnConfig c;
  c.dtype = dtype;
  c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 7, c.heads = 2, c.heads_k = 1, c.head_dim = 16;
  c.causal = true;  // query i sees keys [0, i + 2]
  return c;
}

class Numerics : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { FA_SKIP_IF_DEVICE_MISSING(GetParam()); }
  Device device() const { return device_of(GetParam()); }
};

// Element-wise: where `nan_expected` is true the output must be NaN, elsewhere finite and within
// flash-attn's criterion of the reference (computed on the same inputs).
void expect_nan_pattern(const std::string& what, const HostTensor& got, const HostTensor& ref,
                        const std::vector<double>& naive, const std::vector<bool>& nan_expected, DType dtype) {
  HostTensor got_defined = got;
  std::vector<double> ref_defined = ref.to_double(), naive_defined = naive;
  int64_t wrong = 0, first_wrong = -1;
  for (int64_t k = 0; k < got.numel(); ++k) {
    const bool ok = nan_expected[size_t(k)] ? std::isnan(got.get(k)) : std::isfinite(got.get(k));
    if (!ok && wrong++ == 0) first_wrong = k;
    if (nan_expected[size_t(k)] || !ok) {
      got_defined.set(k, 0.0);
      ref_defined[size_t(k)] = naive_defined[size_t(k)] = 0.0;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " elements not NaN where expected or not finite elsewhere; first "
                      << what << "[" << first_wrong << "] = " << (first_wrong >= 0 ? got.get(first_wrong) : 0.0)
                      << (first_wrong >= 0 && nan_expected[size_t(first_wrong)] ? ", expected NaN"
                                                                                : ", expected finite");
  EXPECT_TRUE(within_criterion(what, got_defined, ref_defined, naive_defined, dtype));
}

// (seqlen_q, seqlen_k) reaching each cpu_flash engine with 2 heads per kv head: tiles (10 packed rows),
// decode (6 rows), decode with the keys split over threads (2 rows, 2100 keys).
const int64_t kEngineShapes[][2] = {{5, 7}, {3, 7}, {1, 2100}};

TEST_P(Numerics, NanInQueryMakesOnlyItsRowNan) {
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [sq, sk] : kEngineShapes) {
      AttnConfig c = small_causal(dt);
      c.seqlen_q = sq, c.seqlen_k = sk;
      c.softcap = dt == DType::bf16 ? 5.0f : 0.0f;  // tanh(NaN) must stay NaN
      SCOPED_TRACE(c.name());
      AttnInputs in = make_inputs(c, 1);
      in.q.set(at(in.q, 0, sq - 1, 1, 3), kNaN);
      FwdOutputs got;
      FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
      const FwdOutputs ref = reference_forward(in);
      const NaiveOutputs naive = naive_lowp(in, false);
      std::vector<bool> nan_out(size_t(got.out.numel()), false);
      for (int64_t d = 0; d < 16; ++d) nan_out[size_t(at(got.out, 0, sq - 1, 1, d))] = true;
      expect_nan_pattern("out", got.out, ref.out, naive.out, nan_out, dt);
      EXPECT_FALSE(std::isfinite(got.lse.get(lse_at(got.lse, 0, 1, sq - 1))));
    }
}

TEST_P(Numerics, NanInKeyReachesOnlyRowsThatSeeIt) {
  for (auto [sq, sk] : kEngineShapes) {
    AttnConfig c = small_causal(DType::f32);
    c.seqlen_q = sq, c.seqlen_k = sk;
    SCOPED_TRACE(c.name());
    AttnInputs in = make_inputs(c, 2);
    const int64_t j = sk - 2;  // causal: visible to queries i >= j - (sk - sq), hidden from the others
    in.k.set(at(in.k, 0, j, 0, 5), kNaN);
    FwdOutputs got;
    FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
    const FwdOutputs ref = reference_forward(in);
    const NaiveOutputs naive = naive_lowp(in, false);
    std::vector<bool> nan_out(size_t(got.out.numel()), false);
    for (int64_t i = 0; i < sq; ++i) {
      const bool sees = j <= i + sk - sq;
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t d = 0; d < 16; ++d) nan_out[size_t(at(got.out, 0, i, h, d))] = sees;
        EXPECT_EQ(std::isfinite(got.lse.get(lse_at(got.lse, 0, h, i))), !sees) << "row " << i << " head " << h;
      }
    }
    expect_nan_pattern("out", got.out, ref.out, naive.out, nan_out, DType::f32);
  }
}

TEST_P(Numerics, NanInValueReachesTheColumnOfRowsThatSeeIt) {
  AttnInputs in = make_inputs(small_causal(DType::f32), 3);
  in.v.set(at(in.v, 0, 2, 0, 7), kNaN);  // key 2 of batch 0: visible to every query of batch 0
  FwdOutputs got;
  FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  std::vector<bool> nan_out(size_t(got.out.numel()), false);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t h = 0; h < 2; ++h) nan_out[size_t(at(got.out, 0, i, h, 7))] = true;
  expect_nan_pattern("out", got.out, ref.out, naive.out, nan_out, DType::f32);
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, ref.lse.to_double(), naive.lse, DType::f32));
}

TEST_P(Numerics, InfiniteLogitMakesTheRowNan) {
  AttnInputs in = make_inputs(small_causal(DType::f32), 4);
  in.q.set(at(in.q, 1, 4, 0, 0), kInf);  // +inf and -inf logits in one row: inf - inf in the softmax
  in.k.set(at(in.k, 1, 0, 0, 0), 1.0);
  in.k.set(at(in.k, 1, 1, 0, 0), -1.0);
  FwdOutputs got;
  FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  std::vector<bool> nan_out(size_t(got.out.numel()), false);
  for (int64_t d = 0; d < 16; ++d) nan_out[size_t(at(got.out, 1, 4, 0, d))] = true;
  expect_nan_pattern("out", got.out, ref.out, naive.out, nan_out, DType::f32);
  EXPECT_FALSE(std::isfinite(got.lse.get(lse_at(got.lse, 1, 0, 4))));
}

TEST_P(Numerics, SoftcapCapsInfiniteDotProducts) {
  // softcap * tanh(+-inf) = +-softcap: a row whose dot products are infinite stays finite under softcap.
  for (auto [sq, sk] : kEngineShapes) {
    AttnConfig c = small_causal(DType::f32);
    c.seqlen_q = sq, c.seqlen_k = sk, c.softcap = 5.0f;
    SCOPED_TRACE(c.name());
    AttnInputs in = make_inputs(c, 12);
    in.q.set(at(in.q, 1, sq - 1, 0, 0), kInf);
    FwdOutputs got;
    FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
    const FwdOutputs ref = reference_forward(in);
    const NaiveOutputs naive = naive_lowp(in, false);
    expect_nan_pattern("out", got.out, ref.out, naive.out, std::vector<bool>(size_t(got.out.numel()), false),
                       DType::f32);
    EXPECT_TRUE(within_criterion("softmax_lse", got.lse, ref.lse.to_double(), naive.lse, DType::f32));
  }
}

TEST_P(Numerics, RowOfMinusInfiniteLogitsIsAnEmptyRow) {
  AttnInputs in = make_inputs(small_causal(DType::f32), 5);
  in.q.set(at(in.q, 1, 3, 1, 0), kInf);
  for (int64_t j = 0; j < 7; ++j) in.k.set(at(in.k, 1, j, 0, 0), -0.5 - std::fabs(in.k.get(at(in.k, 1, j, 0, 0))));
  FwdOutputs got;
  FA_RUN_OR_SKIP(got, run_forward(in, GetParam(), device()));
  for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(got.out.get(at(got.out, 1, 3, 1, d)), 0.0) << "d = " << d;
  EXPECT_EQ(got.lse.get(lse_at(got.lse, 1, 1, 3)), kInf);
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  EXPECT_TRUE(within_criterion("out", got.out, ref.out.to_double(), naive.out, DType::f32));
}

TEST_P(Numerics, FullyMaskedRowsGiveZeroOutputInfiniteLseAndZeroGradients) {
  AttnConfig causal = small_causal(DType::bf16);
  causal.seqlen_q = 9, causal.seqlen_k = 4;  // queries 0..4 see no key
  AttnConfig window = small_causal(DType::f16);
  window.causal = false, window.window_left = 0, window.window_right = 0;
  window.seqlen_q = 6, window.seqlen_k = 3;  // queries 0..2 would see keys -3..-1: none
  AttnConfig varlen = small_causal(DType::f32);
  varlen.varlen_q = {3, 4, 2}, varlen.varlen_k = {0, 5, 0};
  for (const AttnConfig& cfg : {causal, window, varlen}) {
    SCOPED_TRACE(cfg.name());
    const AttnInputs in = make_inputs(cfg, 6);
    FwdOutputs fwd;
    FA_RUN_OR_SKIP(fwd, run_forward(in, GetParam(), device()));
    const std::optional<BwdOutputs> bwd = backward_if_supported(in, fwd, GetParam(), device());
    const FwdOutputs ref = reference_forward(in);
    const NaiveOutputs naive = naive_lowp(in, true);
    // Rows with LSE +inf in the reference are the empty ones; the backend must agree exactly there.
    const int64_t H = cfg.heads, D = cfg.head_dim, rows = in.q.shape()[0] * (cfg.varlen() ? 1 : cfg.seqlen_q);
    int64_t empty = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t l = cfg.varlen() ? h * rows + r : lse_at(ref.lse, r / cfg.seqlen_q, h, r % cfg.seqlen_q);
        if (ref.lse.get(l) != kInf) continue;
        ++empty;
        EXPECT_EQ(fwd.lse.get(l), kInf);
        for (int64_t d = 0; d < D; ++d) {
          EXPECT_EQ(fwd.out.get((r * H + h) * D + d), 0.0);
          if (bwd) EXPECT_EQ(bwd->dq.get((r * H + h) * D + d), 0.0);
        }
      }
    EXPECT_GT(empty, 0);
    expect_forward_within_criterion(fwd, ref, naive, cfg.dtype);
    if (bwd) expect_backward_within_criterion(*bwd, reference_backward(in), naive, cfg.dtype);
  }
}

double max_abs(const HostTensor& t) {
  double m = 0;
  for (int64_t k = 0; k < t.numel(); ++k) m = std::max(m, std::fabs(t.get(k)));
  return m;
}

// Forward and backward of `in` finite everywhere and the forward within the criterion of the reference.
// `close_gradients`: the gradients too; otherwise they are only held to the bound the math gives
// (|dS_ij| <= P_ij * 2 * D * max|dout| * max|v| with sum_j P_ij = 1, times dlogit/dqk <= scale), which
// catches overflow and garbage where fp32 conditioning rules out a closer comparison: at a softmax_scale
// of 1e4, logits of ~1e5 carry fp32 errors of ~1e-2, so nearly tied probabilities legitimately move by
// percents, and a one-hot row's dS = dP - D is pure rounding of two dot products, times 1e4.
void expect_finite_and_close(const std::string& backend, Device device, const AttnInputs& in, bool close_gradients) {
  const AttnConfig& cfg = in.cfg;
  SCOPED_TRACE(cfg.name());
  const FwdOutputs fwd = run_forward(in, backend, device);
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, true);
  for (const HostTensor* t : {&fwd.out, &fwd.lse})
    for (int64_t k = 0; k < t->numel(); ++k) ASSERT_TRUE(std::isfinite(t->get(k))) << "element " << k;
  expect_forward_within_criterion(fwd, ref, naive, cfg.dtype);
  const std::optional<BwdOutputs> maybe_bwd = backward_if_supported(in, fwd, backend, device);
  if (!maybe_bwd) return;
  const BwdOutputs& bwd = *maybe_bwd;
  for (const HostTensor* t : {&bwd.dq, &bwd.dk, &bwd.dv})
    for (int64_t k = 0; k < t->numel(); ++k) ASSERT_TRUE(std::isfinite(t->get(k))) << "element " << k;
  if (close_gradients) {
    const BwdOutputs ref_bwd = reference_backward(in);
    expect_backward_within_criterion(bwd, ref_bwd, naive, cfg.dtype);
    return;
  }
  const double scale = std::fabs(cfg.softmax_scale.value_or(1.0 / std::sqrt(double(cfg.head_dim))));
  const double rows = double(cfg.seqlen_q * (cfg.heads / cfg.heads_k));
  const double ds = 2.0 * double(cfg.head_dim) * max_abs(in.dout) * max_abs(in.v) * 1.01;
  EXPECT_LE(max_abs(bwd.dq), scale * max_abs(in.k) * ds);
  EXPECT_LE(max_abs(bwd.dk), scale * max_abs(in.q) * ds * rows);
  EXPECT_LE(max_abs(bwd.dv), max_abs(in.dout) * rows * 1.01);
}

AttnInputs scaled_inputs(const AttnConfig& cfg, uint64_t seed, double qk_factor) {
  AttnInputs in = make_inputs(cfg, seed);
  for (HostTensor* t : {&in.q, &in.k})
    for (int64_t k = 0; k < t->numel(); ++k) t->set(k, t->get(k) * qk_factor);
  return in;
}

// A configuration the backend does not support (e.g. f32 on cuda_sm80) is passed over; the others run.
#define FA_SKIP_UNSUPPORTED(statement)                       \
  try {                                                      \
    statement;                                               \
  } catch (const flashattn::Error& e) {                      \
    if (e.status() != flashattn::Status::unsupported) throw; \
  }

TEST_P(Numerics, ExtremeSoftmaxScalesMatchWithModerateLogits) {
  // q and k rescaled so that the logits are O(1) again: every output must match, gradients included.
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [scale, factor] : {std::pair{1e4f, 1e-2}, std::pair{1e-6f, 1e3}}) {
      AttnConfig c = small_causal(dt);
      c.seqlen_q = 20, c.seqlen_k = 70, c.head_dim = 32;
      c.softmax_scale = scale;
      FA_SKIP_UNSUPPORTED(expect_finite_and_close(GetParam(), device(), scaled_inputs(c, 7, factor), true));
    }
}

TEST_P(Numerics, ExtremeSoftmaxScalesStayFiniteWithExtremeLogits) {
  // Unit q and k: logits of ~1e5 (a one-hot softmax whose exp overflows without the running max) and
  // ~1e-5 (a uniform one).
  for (DType dt : {DType::f32, DType::bf16})
    for (float scale : {1e4f, 1e-6f}) {
      AttnConfig c = small_causal(dt);
      c.seqlen_q = 20, c.seqlen_k = 70, c.head_dim = 32;
      c.softmax_scale = scale;
      FA_SKIP_UNSUPPORTED(expect_finite_and_close(GetParam(), device(), make_inputs(c, 7), scale < 1.0f));
    }
}

TEST_P(Numerics, NonPositiveSoftmaxScalesMatch) {
  // A negative scale makes the largest dot product the smallest logit, zero a uniform softmax. The sm80
  // forward's feature-free kernel takes its running maximum before scaling, so it must never get these;
  // the extreme case (logits spanning ~2000 in base 2) overflows exp2 if it did.
  for (DType dt : {DType::f32, DType::bf16}) {
    AttnConfig c = small_causal(dt);
    c.seqlen_q = 20, c.seqlen_k = 70, c.head_dim = 32;
    for (float scale : {-0.5f, 0.0f}) {
      c.softmax_scale = scale;
      FA_SKIP_UNSUPPORTED(expect_finite_and_close(GetParam(), device(), make_inputs(c, 11), true));
    }
    c.softmax_scale = -1.0f;
    FA_SKIP_UNSUPPORTED(expect_finite_and_close(GetParam(), device(), scaled_inputs(c, 11, 8.0), false));
  }
}

TEST_P(Numerics, ExtremeSoftcapsStayFiniteAndMatch) {
  // softcap 1e4 is nearly the identity; softcap 1e-4 saturates tanh (logits within +-1e-4) and scales the
  // tanh argument by 1 / softcap, so its gradients are only held to the bound.
  for (float softcap : {1e4f, 1e-4f}) {
    AttnConfig c = small_causal(DType::f32);
    c.seqlen_q = 20, c.seqlen_k = 70, c.head_dim = 32;
    c.softcap = softcap;
    FA_SKIP_UNSUPPORTED(expect_finite_and_close(GetParam(), device(), make_inputs(c, 8), softcap > 1.0f));
  }
}

// q and k around 200 in f16: q.k reaches ~1e6, far beyond f16's 65504, so only fp32 accumulation keeps the
// logits finite. The softmax is then nearly one-hot, and out is close to the value row of the winning key.
TEST_P(Numerics, LargeF16InputsDoNotOverflow) {
  AttnConfig c = small_causal(DType::f16);
  c.seqlen_q = 20, c.seqlen_k = 40, c.head_dim = 64;
  AttnInputs in = make_inputs(c, 9);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> mag(150.0, 250.0);
  for (HostTensor* t : {&in.q, &in.k})
    for (int64_t k = 0; k < t->numel(); ++k) t->set(k, (rng() & 1 ? 1 : -1) * mag(rng));
  FwdOutputs fwd;
  FA_RUN_OR_SKIP(fwd, run_forward(in, GetParam(), device()));
  const FwdOutputs ref = reference_forward(in);
  // The naive f16 path overflows here, so the criterion's bound would be infinite: use absolute bounds.
  // out and dv are sums of unit-scale values with weights summing to 1; LSE is ~1e5, off by fp32 rounding
  // of the dot products (relative ~1e-6).
  for (int64_t k = 0; k < fwd.out.numel(); ++k) ASSERT_NEAR(fwd.out.get(k), ref.out.get(k), 2e-2) << "out " << k;
  for (int64_t k = 0; k < fwd.lse.numel(); ++k)
    ASSERT_NEAR(fwd.lse.get(k), ref.lse.get(k), 1e-5 * std::fabs(ref.lse.get(k)) + 1e-3) << "lse " << k;
  const std::optional<BwdOutputs> maybe_bwd = backward_if_supported(in, fwd, GetParam(), device());
  if (!maybe_bwd) return;
  const BwdOutputs& bwd = *maybe_bwd;
  const BwdOutputs ref_bwd = reference_backward(in);
  for (int64_t k = 0; k < bwd.dv.numel(); ++k) ASSERT_NEAR(bwd.dv.get(k), ref_bwd.dv.get(k), 5e-2) << "dv " << k;
  for (const HostTensor* t : {&bwd.dq, &bwd.dk})
    for (int64_t k = 0; k < t->numel(); ++k) ASSERT_TRUE(std::isfinite(t->get(k))) << "element " << k;
}

TEST_P(Numerics, EmptyShapesRunAndWriteEveryOutput) {
  AttnConfig no_batch = small_causal(DType::f32);
  no_batch.batch = 0;
  AttnConfig no_queries = small_causal(DType::f16);
  no_queries.seqlen_q = 0;  // dk and dv must still be written: zeros
  AttnConfig no_keys = small_causal(DType::bf16);
  no_keys.seqlen_k = 0;  // every row empty
  AttnConfig no_heads = small_causal(DType::f16);
  no_heads.heads = no_heads.heads_k = 0;
  AttnConfig empty_varlen = small_causal(DType::f32);
  empty_varlen.varlen_q = {0, 3, 0, 2}, empty_varlen.varlen_k = {4, 0, 0, 6};
  AttnConfig all_empty_varlen = small_causal(DType::f32);
  all_empty_varlen.varlen_q = {0, 0}, all_empty_varlen.varlen_k = {0, 0};
  for (const AttnConfig& cfg : {no_batch, no_queries, no_keys, no_heads, empty_varlen, all_empty_varlen}) {
    SCOPED_TRACE(cfg.name());
    const AttnInputs in = make_inputs(cfg, 10);
    FwdOutputs fwd;
    FA_RUN_OR_SKIP(fwd, run_forward(in, GetParam(), device()));
    const NaiveOutputs naive = naive_lowp(in, true);
    // Poisoned outputs: any element left unwritten is NaN and fails the criterion.
    expect_forward_within_criterion(fwd, reference_forward(in), naive, cfg.dtype);
    const std::optional<BwdOutputs> bwd = backward_if_supported(in, fwd, GetParam(), device());
    if (bwd) expect_backward_within_criterion(*bwd, reference_backward(in), naive, cfg.dtype);
  }
}

// The capability checks of every backend of the build, CUDA ones included, run on the host: asked about
// empty calls (as a forced backend is, where the dispatcher would run none), none may divide by a zero
// size. Runs without a GPU, so that CI sees what only the GPU tests' forced backends used to reach
// (cuda_naive's check divided by heads_k = 0).
TEST(EmptyShapes, EveryBackendsCapabilityCheckTakesThem) {
  AttnConfig no_batch = small_causal(DType::f16), no_queries = no_batch, no_keys = no_batch, no_heads = no_batch;
  no_batch.batch = 0;
  no_queries.seqlen_q = 0;
  no_keys.seqlen_k = 0;
  no_heads.heads = no_heads.heads_k = 0;
  for (const AttnConfig& cfg : {no_batch, no_queries, no_keys, no_heads}) {
    SCOPED_TRACE(cfg.name());
    const AttnInputs in = make_inputs(cfg, 3);
    flashattn::detail::FwdProblem fwd;
    const FwdOutputs out = run_forward_via(
        in, "", Device::cpu(), [&](const flashattn::FwdParams& p) { fwd = flashattn::detail::make_fwd_problem(p); });
    flashattn::detail::BwdProblem bwd;
    run_backward_via(in, out, "", Device::cpu(), false,
                     [&](const flashattn::BwdParams& p) { bwd = flashattn::detail::make_bwd_problem(p); });
    EXPECT_EQ(fwd.heads, cfg.heads);
    EXPECT_EQ(bwd.batch, cfg.batch);
    // A check that needs the device's properties throws flashattn::Error where there is none: an
    // answer; a fault would end the process.
    const auto ask = [](auto&& check) {
      try {
        (void)check();
      } catch (const flashattn::Error&) {
      }
    };
    for (const flashattn::detail::Backend& b : flashattn::detail::registry()) {
      SCOPED_TRACE(b.name);
      ask([&] { return flashattn::detail::capability_reason(b, fwd); });
      if (b.supports_fwd) ask([&] { return b.supports_fwd(fwd); });
      if (b.supports_bwd) ask([&] { return b.supports_bwd(bwd); });
    }
  }
}

TEST_P(Numerics, EmptyKvCacheGivesEmptyRows) {
  KVConfig c;
  c.dtype = DType::f32;
  c.batch = 2, c.seqlen_q = 3, c.heads = 4, c.heads_k = 2, c.head_dim = 32, c.capacity = 16;
  c.cache_seqlens = {0, 0};
  const KVInputs in = make_kv_inputs(c, 11);
  KVOutputs got;
  FA_RUN_OR_SKIP(got, run_kvcache(in, GetParam(), device()));
  for (int64_t k = 0; k < got.out.numel(); ++k) ASSERT_EQ(got.out.get(k), 0.0) << "out " << k;
  for (int64_t k = 0; k < got.lse.numel(); ++k) ASSERT_EQ(got.lse.get(k), kInf) << "lse " << k;
}

TEST_P(Numerics, KvCacheCallsWithoutBatchOrHeadsRun) {
  for (const bool no_heads : {false, true}) {
    KVConfig c;
    c.dtype = DType::bf16;
    c.batch = no_heads ? 2 : 0, c.seqlen_q = 1, c.head_dim = 32, c.capacity = 16, c.seqlen_new = 1;
    if (no_heads) c.heads = c.heads_k = 0;
    c.cache_seqlens.assign(size_t(c.batch), 3);
    SCOPED_TRACE(c.name());
    const KVInputs in = make_kv_inputs(c, 12);
    KVOutputs got;
    FA_RUN_OR_SKIP(got, run_kvcache(in, GetParam(), device()));
    EXPECT_EQ(got.out.numel(), 0);
    EXPECT_EQ(got.lse.numel(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Numerics, testing::ValuesIn(all_backends()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace fa_test
