// FP8 attention's semantics (issue 32): q, k, v in float8 e4m3 with optional fp32 (batch, kv head) descale
// factors (flash-attn 3's q_descale / k_descale / v_descale), out in bf16. Checked against an oracle that
// dequantises in the test (stored value x factor, in fp32) and runs the fp64 reference on that: so the
// library's own dequantisation, the factors' broadcast (q's factor is its kv head's) and the bf16 store are
// what is tested. The bound is flash-attn's criterion with a naive bf16 computation of the dequantised
// problem as the low-precision baseline. Every backend is run: those without FP8 must decline with a
// reason naming the dtype (the dispatcher then falls back to one that has it), never compute garbage.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attention_case.h"
#include "common/convert.h"
#include "criterion.h"
#include "kvcache_case.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

using flashattn::DType;

// in's q, k, v (and the call's paged or seqused_k copies) as fp32 values x their (sequence, kv head)
// factor, without descale tensors: what the FP8 call means, computed outside the library.
AttnInputs dequantised(const AttnInputs& in) {
  AttnInputs d = in;
  d.cfg.dtype = DType::f32;
  d.cfg.descale = false;
  d.q_descale = d.k_descale = d.v_descale = HostTensor();
  const AttnConfig& c = in.cfg;
  const int64_t H = c.heads, Hk = c.heads_k, D = c.head_dim, group = H / Hk;
  const auto factor = [&](const HostTensor& t, int64_t b, int64_t hk) {
    return t.present() ? t.get(b * Hk + hk) : 1.0;
  };
  // Sequence of packed row r (varlen) or of row r of a dense (B, S, H, D) tensor with `seq` rows each.
  const auto seq_of = [&](const HostTensor& cu, int64_t r, int64_t seq) {
    if (!c.varlen()) return r / seq;
    int64_t b = 0;
    while (b + 1 < c.num_seqs() && cu.i32()[b + 1] <= r) ++b;
    return b;
  };
  const auto convert = [&](const HostTensor& src, const HostTensor& scale, const HostTensor& cu, int64_t seq,
                           int64_t heads, int64_t per_kv) {
    HostTensor out(DType::f32, src.shape());
    const int64_t rows = src.numel() / (heads * D);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t x = 0; x < D; ++x) {
          const int64_t i = (r * heads + h) * D + x;
          out.set(i, float(float(src.get(i)) * float(factor(scale, seq_of(cu, r, seq), h / per_kv))));
        }
    return out;
  };
  d.q = convert(in.q, in.q_descale, in.cu_seqlens_q, c.seqlen_q, H, group);
  d.k = convert(in.k, in.k_descale, in.cu_seqlens_k, c.seqlen_k, Hk, 1);
  d.v = convert(in.v, in.v_descale, in.cu_seqlens_k, c.seqlen_k, Hk, 1);
  d.dout = in.dout.as(DType::f32);
  // The paged / seqused_k copies are only what the call reads; the oracle reads d.k, d.v (contiguous).
  d.call_k = d.call_v = d.call_cu_seqlens_k = d.block_table = d.seqused_k = HostTensor();
  d.cfg.page_size = 0;
  d.cfg.seqused_k = false;
  return d;
}

// Calls `run(name)` for every backend this machine can run (the CUDA ones only with a device), under a
// trace of its name. A backend that declines must do so with Status::unsupported, and only where
// `may_decline(name, message)` allows it.
template <typename Run, typename MayDecline>
void each_backend(Run&& run, MayDecline&& may_decline) {
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) {
    if (b.device == flashattn::DeviceType::cuda && !cuda_available()) continue;
    SCOPED_TRACE(b.name);
    try {
      run(b.name);
    } catch (const flashattn::Error& e) {
      EXPECT_EQ(e.status(), flashattn::Status::unsupported) << e.what();
      EXPECT_TRUE(may_decline(b.name, std::string(e.what()))) << e.what();
    }
  }
}

std::vector<AttnConfig> fp8_cases() {
  std::vector<AttnConfig> out;
  const auto base = [](int64_t d) {
    AttnConfig c;
    c.dtype = DType::fp8_e4m3;
    c.head_dim = d;
    c.heads = 8;
    c.heads_k = 2;
    c.batch = 2;
    c.seqlen_q = 37;
    c.seqlen_k = 75;
    c.descale = true;
    return c;
  };
  for (int64_t d : {64, 128, 40}) {
    AttnConfig c = base(d);
    out.push_back(c);  // GQA 4:1, Sq != Sk, descale factors per (batch, kv head)
    c.causal = true;
    out.push_back(c);
  }
  AttnConfig c = base(128);
  c.descale = false;  // factors absent: 1
  out.push_back(c);
  c = base(64);
  c.heads_k = 8;
  c.window_left = 20;
  c.window_right = 3;
  c.softcap = 15.0f;
  out.push_back(c);
  c = base(64);
  c.alibi = true;
  c.seqlen_q = 1;  // decode-shaped
  out.push_back(c);
  c = base(128);
  c.varlen_q = {17, 0, 40};
  c.varlen_k = {30, 9, 64};
  c.causal = true;
  out.push_back(c);  // varlen, an empty sequence
  c.page_size = 16;  // paged K/V in the varlen forward (vLLM's call with an FP8 cache)
  c.seqused_k = true;
  out.push_back(c);
  c.descale = false;  // the same without factors (cuda_fp8 declines paged K/V with a v factor)
  out.push_back(c);
  return out;
}

class Fp8Forward : public testing::TestWithParam<int> {};

TEST_P(Fp8Forward, MatchesTheDequantisedReference) {
  const AttnConfig cfg = fp8_cases()[size_t(GetParam())];
  SCOPED_TRACE(cfg.name());
  const AttnInputs in = make_inputs(cfg, 8100 + uint64_t(GetParam()));
  const AttnInputs deq = dequantised(in);
  const FwdOutputs ref = reference_forward(deq);
  AttnInputs naive_in = deq;
  naive_in.cfg.dtype = DType::bf16;  // the low-precision baseline: a naive bf16 computation
  const NaiveOutputs naive = naive_lowp(naive_in, false);
  // cuda_sm90's native FP8 forward stores P in e4m3 for its P V product: its baseline is the naive bf16
  // computation with P so stored (naive_lowp's p_in_e4m3), the rest of the criterion the same.
  const NaiveOutputs naive_p8 = naive_lowp(naive_in, false, /*p_in_e4m3=*/true);
  int ran = 0;
  bool ran_gpu = false;
  each_backend(
      [&](const std::string& name) {
        const FwdOutputs got = run_forward(in, name, device_of(name));
        ASSERT_EQ(got.out.dtype(), DType::bf16);
        expect_forward_within_criterion(got, ref, name == "cuda_sm90" ? naive_p8 : naive, DType::bf16);
        ++ran;
        ran_gpu = ran_gpu || name == "cuda_fp8";
      },
      // The FP8 backends run every case but cuda_fp8's paged K/V with a v factor (its dequantised copies
      // are per page, and sequences sharing a page may scale it differently); the others decline (with
      // the dtype, or whatever they check first).
      [&](const std::string& name, const std::string& what) {
        const bool paged_factor =
            name == "cuda_fp8" && cfg.page_size > 0 && cfg.descale && what.find("v_descale") != std::string::npos;
        return name != "cpu_reference" && name != "cpu_flash" && (name != "cuda_fp8" || paged_factor);
      });
  if (cuda_available() && !(cfg.page_size > 0 && cfg.descale)) EXPECT_TRUE(ran_gpu) << "cuda_fp8 did not run";
  EXPECT_GE(ran, 2) << "no backend but cpu_reference ran the FP8 call (cpu_flash must)";
  // And the default choice runs it.
  const FwdOutputs chosen = run_forward(in, "", flashattn::Device::cpu());
  expect_forward_within_criterion(chosen, ref, naive, DType::bf16);
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8Forward, testing::Range(0, int(fp8_cases().size())),
                         [](const testing::TestParamInfo<int>& info) {
                           return fp8_cases()[size_t(info.param)].name();
                         });

// cuda_sm90's native FP8 forward (head dim 128, dense) where the catalogue's short cases do not reach: several
// key tiles (the four-stage ring wraps), several query tiles, partial last tiles, causal, a window, GQA,
// one query row; each result within the criterion (baseline: naive bf16 with P stored in e4m3, as the
// kernel does) and bitwise equal when run again. Skips, with the backend's reason, where cuda_sm90 declines
// (no GPU, not sm_90).
TEST(Fp8ForwardSm90, AcrossTilesAndStages) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t sq, sk, heads, heads_k;
    bool causal;
    int64_t window_left;
  };
  const Shape shapes[] = {{300, 1100, 4, 2, false, -1},
                          {300, 1100, 4, 2, true, -1},
                          {129, 129, 2, 2, true, -1},
                          {1, 513, 8, 1, false, -1},
                          {256, 700, 4, 4, false, 100}};
  uint64_t seed = 8200;
  for (const Shape& s : shapes) {
    AttnConfig c;
    c.dtype = DType::fp8_e4m3;
    c.head_dim = 128;
    c.batch = 2;
    c.heads = s.heads;
    c.heads_k = s.heads_k;
    c.seqlen_q = s.sq;
    c.seqlen_k = s.sk;
    c.causal = s.causal;
    if (s.window_left >= 0) {
      c.window_left = s.window_left;
      c.window_right = 0;
    }
    c.descale = seed % 2 == 0;
    SCOPED_TRACE(c.name());
    const AttnInputs in = make_inputs(c, seed++);
    FwdOutputs got;
    try {
      got = run_forward(in, "cuda_sm90", flashattn::Device::cuda(0));
    } catch (const flashattn::Error& e) {
      if (e.status() != flashattn::Status::unsupported) throw;
      GTEST_SKIP() << e.what();
    }
    const AttnInputs deq = dequantised(in);
    AttnInputs naive_in = deq;
    naive_in.cfg.dtype = DType::bf16;
    expect_forward_within_criterion(got, reference_forward(deq), naive_lowp(naive_in, false, /*p_in_e4m3=*/true),
                                    DType::bf16);
    const FwdOutputs again = run_forward(in, "cuda_sm90", flashattn::Device::cuda(0));
    EXPECT_EQ(std::memcmp(got.out.data(), again.out.data(), size_t(got.out.numel()) * 2), 0) << "not repeatable";
    if (HasFailure()) return;
  }
}

// float8 e4m3fn conversions: every finite code round-trips; halfway values round to the even code; values
// beyond 448 saturate; NaN stays NaN.
TEST(Fp8Convert, RoundTripsRoundsToEvenAndSaturates) {
  using flashattn::detail::e4m3_to_float;
  using flashattn::detail::float_to_e4m3;
  for (int b = 0; b < 256; ++b) {
    const float f = e4m3_to_float(uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    EXPECT_EQ(float_to_e4m3(f), uint8_t(b)) << b << " " << f;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  for (int b = 0; b < 0x7E; ++b) {
    const float lo = e4m3_to_float(uint8_t(b)), hi = e4m3_to_float(uint8_t(b + 1));
    EXPECT_EQ(float_to_e4m3(0.5f * (lo + hi)), uint8_t(b % 2 == 0 ? b : b + 1)) << b;
    EXPECT_EQ(float_to_e4m3(-0.5f * (lo + hi)), uint8_t(0x80 | (b % 2 == 0 ? b : b + 1))) << b;
  }
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_e4m3(NAN) & 0x7F, 0x7F);
}

// Wrong FP8 calls are refused with the argument named, before anything is written.
TEST(Fp8Errors, NameTheArgument) {
  const AttnConfig cfg = fp8_cases()[0];
  const AttnInputs in = make_inputs(cfg, 1);
  AttnConfig bf_cfg;
  bf_cfg.dtype = DType::bf16;
  const AttnInputs bf = make_inputs(bf_cfg, 2);
  // `src`'s call on cpu_reference (out bf16, its descale factors if any), changed by `edit`.
  const auto expect_error = [](const AttnInputs& src, const std::function<void(flashattn::FwdParams&)>& edit,
                               const char* name) {
    SCOPED_TRACE(name);
    HostTensor out(DType::bf16, src.q.shape());
    HostTensor q = src.q, k = src.k, v = src.v, qd = src.q_descale, kd = src.k_descale, vd = src.v_descale;
    flashattn::FwdParams p;
    fill_call_options(p, src);
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.q_descale = qd.view();
    p.k_descale = kd.view();
    p.v_descale = vd.view();
    p.options.backend = "cpu_reference";
    edit(p);
    try {
      flashattn::forward(p);
      ADD_FAILURE() << "no error";
    } catch (const flashattn::Error& e) {
      EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  HostTensor out16(DType::f16, in.q.shape()), kbf(DType::bf16, in.k.shape()), small(DType::f32, {1, 1}),
      qd16(DType::f16, {cfg.batch, cfg.heads_k}), bqd(DType::f32, {bf_cfg.batch, bf_cfg.heads_k});
  expect_error(
      in, [&](flashattn::FwdParams& p) { p.out = out16.view(); }, "out");  // FP8 writes bf16
  expect_error(
      in, [&](flashattn::FwdParams& p) { p.k = kbf.view(); }, "k");  // all three fp8
  expect_error(
      in, [&](flashattn::FwdParams& p) { p.q_descale = small.view(); }, "q_descale");  // (batch, heads_k)
  expect_error(
      in, [&](flashattn::FwdParams& p) { p.v_descale = qd16.view(); }, "v_descale");  // fp32
  expect_error(
      in, [&](flashattn::FwdParams& p) { p.dropout_p = 0.1f; }, "dropout_p");
  expect_error(
      bf, [&](flashattn::FwdParams& p) { p.k_descale = bqd.view(); }, "k_descale");  // needs fp8 inputs
}

// FP8 has no backward: refused, naming q.
TEST(Fp8Errors, BackwardIsRefused) {
  const AttnConfig cfg = fp8_cases()[0];
  const AttnInputs in = make_inputs(cfg, 3);
  const FwdOutputs fwd = run_forward(in, "cpu_reference", flashattn::Device::cpu());
  try {
    run_backward(in, fwd, "cpu_reference", flashattn::Device::cpu());
    ADD_FAILURE() << "no error";
  } catch (const flashattn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no backward"), std::string::npos) << e.what();
  }
}

// An FP8 KV cache (k_cache, v_cache e4m3 with k/v_descale; q, the new rows and out bf16), against the same
// call with bf16 caches that hold the dequantised values. The inputs are snapped to values that both
// representations hold exactly (e4m3 codes times power-of-two factors, one per kv head), so the two calls
// must agree bit for bit in cpu_reference: outputs, LSE, and the caches after the append (the FP8 one
// dequantised). cpu_flash (the default choice on the CPU) computes in fp32 with the factors folded into the
// query's scale and the output's normalisation: within the oracle's criterion, and its append is the
// reference's bit for bit. Contiguous and paged caches, GQA 4:1, causal, three appended tokens.
TEST(Fp8KVCache, MatchesTheDequantisedCacheBitwise) {
  using flashattn::detail::e4m3_to_float;
  using flashattn::detail::float_to_e4m3;
  for (int64_t page : {0, 16}) {
    KVConfig c;
    c.dtype = DType::bf16;
    c.batch = 2;
    c.heads = 8;
    c.heads_k = 2;
    c.seqlen_q = 2;
    c.capacity = 48;
    c.page_size = page;
    c.cache_seqlens = {10, 29};
    c.seqlen_new = 3;
    c.causal = true;
    SCOPED_TRACE(c.name());
    KVInputs in = make_kv_inputs(c, 8800 + uint64_t(page));
    const double factors[] = {0.5, 2.0};  // per kv head (the same for every sequence: pages need no owner)
    const auto snap = [&](HostTensor& t, HostTensor* codes) {
      const int64_t D = c.head_dim, Hk = c.heads_k;
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double d = factors[(i / D) % Hk];
        const uint8_t code = float_to_e4m3(float(t.get(i) / d));
        t.set(i, double(e4m3_to_float(code)) * d);
        if (codes) codes->set(i, double(e4m3_to_float(code)));
      }
    };
    HostTensor k8(DType::fp8_e4m3, in.k_cache.shape()), v8(DType::fp8_e4m3, in.v_cache.shape());
    snap(in.k_cache, &k8);
    snap(in.v_cache, &v8);
    snap(in.k_new, nullptr);
    snap(in.v_new, nullptr);
    const KVOutputs ref = run_kvcache(in, "cpu_reference", flashattn::Device::cpu());
    KVInputs in8 = in;
    in8.k_cache = k8;
    in8.v_cache = v8;
    HostTensor kd(DType::f32, {c.batch, c.heads_k}), vd(DType::f32, {c.batch, c.heads_k});
    for (int64_t i = 0; i < kd.numel(); ++i) kd.set(i, factors[i % c.heads_k]), vd.set(i, factors[i % c.heads_k]);
    const auto with_descales = [&](const std::string& backend) {
      return run_kvcache_via(in8, backend, flashattn::Device::cpu(), [&](const flashattn::KVCacheParams& p) {
        flashattn::KVCacheParams q = p;
        q.k_descale = kd.view();
        q.v_descale = vd.view();
        flashattn::forward_kvcache(q);
      });
    };
    const KVOutputs got = with_descales("cpu_reference");
    ASSERT_EQ(got.out.nbytes(), ref.out.nbytes());
    EXPECT_EQ(std::memcmp(got.out.data(), ref.out.data(), ref.out.nbytes()), 0);
    EXPECT_EQ(std::memcmp(got.lse.data(), ref.lse.data(), ref.lse.nbytes()), 0);
    for (const auto& [cache8, cache16] : {std::pair{&got.k_cache, &ref.k_cache}, std::pair{&got.v_cache, &ref.v_cache}})
      for (int64_t i = 0; i < cache16->numel(); ++i)
        ASSERT_EQ(cache8->get(i) * factors[(i / c.head_dim) % c.heads_k], cache16->get(i)) << i;
    const KVOracle oracle = kv_oracle(in);
    for (const char* backend : {"cpu_flash", ""}) {
      SCOPED_TRACE(backend);
      const KVOutputs flash = with_descales(backend);
      EXPECT_TRUE(within_criterion("out", flash.out, oracle.out, oracle.naive_out, c.dtype));
      EXPECT_TRUE(within_criterion("softmax_lse", flash.lse, oracle.lse, oracle.naive_lse, DType::f32));
      EXPECT_EQ(std::memcmp(flash.k_cache.data(), got.k_cache.data(), got.k_cache.nbytes()), 0);
      EXPECT_EQ(std::memcmp(flash.v_cache.data(), got.v_cache.data(), got.v_cache.nbytes()), 0);
    }
  }
}

// cpu_flash's FP8 cache at the shapes it runs differently (one query row per sequence and GQA 8:1, the
// shape of decode; a window and softcap; 16-bit queries), with factors that differ per sequence and kv
// head and are not powers of two, against the oracle of the equivalent fp32 problem: caches holding code x
// factor, new rows snapped to values whose quotient by the factor rounds back to their code.
TEST(Fp8KVCache, CpuFlashMatchesTheOracleAtDecodeShapes) {
  using flashattn::detail::e4m3_to_float;
  using flashattn::detail::float_to_e4m3;
  for (int variant = 0; variant < 3; ++variant) {
    KVConfig c;
    c.dtype = variant == 2 ? DType::f16 : DType::f32;
    c.batch = 3;
    c.heads = 16;
    c.heads_k = 2;
    c.seqlen_q = variant == 1 ? 3 : 1;
    c.capacity = 80;
    c.cache_seqlens = {0, 41, 77};
    c.seqlen_new = variant == 1 ? 3 : 1;
    c.causal = variant == 1;
    if (variant == 1) c.window_left = 30, c.softcap = 20.0f;
    SCOPED_TRACE(c.name());
    KVInputs in = make_kv_inputs(c, 8900 + uint64_t(variant));
    const int64_t B = c.batch, Hk = c.heads_k, D = c.head_dim;
    HostTensor kd(DType::f32, {B, Hk}), vd(DType::f32, {B, Hk});
    for (int64_t i = 0; i < B * Hk; ++i) kd.set(i, 0.3 + 0.17 * double(i)), vd.set(i, 1.9 - 0.23 * double(i));
    // (B, rows, Hk, D) tensors: element i's factor is that of (i / (rows Hk D), (i / D) % Hk).
    const auto snap = [&](HostTensor& t, const HostTensor& f, HostTensor* codes) {
      const int64_t per_batch = t.numel() / B;
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float d = float(f.get((i / per_batch) * Hk + (i / D) % Hk));
        const uint8_t code = float_to_e4m3(float(t.get(i)) / d);
        t.set(i, double(e4m3_to_float(code) * d));
        if (codes) codes->set(i, double(e4m3_to_float(code)));
      }
    };
    HostTensor k8(DType::fp8_e4m3, in.k_cache.shape()), v8(DType::fp8_e4m3, in.v_cache.shape());
    KVInputs exact = in;  // the fp32 problem the FP8 call means
    exact.cfg.dtype = DType::f32;
    for (HostTensor* t : {&exact.q, &exact.k_cache, &exact.v_cache, &exact.k_new, &exact.v_new}) *t = t->as(DType::f32);
    snap(exact.k_cache, kd, &k8);
    snap(exact.v_cache, vd, &v8);
    snap(exact.k_new, kd, nullptr);
    snap(exact.v_new, vd, nullptr);
    const KVOracle oracle = kv_oracle(exact);
    KVInputs in8 = in;
    in8.k_cache = k8;
    in8.v_cache = v8;
    // In f16 the new rows are code x factor rounded, which over the factor still rounds to the code (its
    // neighbours are at least 2^-5 away relatively): the cache ends up holding what the oracle appended.
    in8.k_new = exact.k_new.as(c.dtype);
    in8.v_new = exact.v_new.as(c.dtype);
    const KVOutputs got =
        run_kvcache_via(in8, "cpu_flash", flashattn::Device::cpu(), [&](const flashattn::KVCacheParams& p) {
          flashattn::KVCacheParams q = p;
          q.k_descale = kd.view();
          q.v_descale = vd.view();
          flashattn::forward_kvcache(q);
        });
    // f16 queries: the criterion's floor is the f16 output's own rounding.
    EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, c.dtype));
    EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
    for (int64_t i = 0; i < got.k_cache.numel(); ++i) {
      const float kf = float(kd.get((i / (got.k_cache.numel() / B)) * Hk + (i / D) % Hk));
      const float vf = float(vd.get((i / (got.v_cache.numel() / B)) * Hk + (i / D) % Hk));
      ASSERT_EQ(float(got.k_cache.get(i)) * kf, float(oracle.appended.k_cache.get(i))) << "k_cache " << i;
      ASSERT_EQ(float(got.v_cache.get(i)) * vf, float(oracle.appended.v_cache.get(i))) << "v_cache " << i;
    }
  }
}

// The FP8 form of a 16-bit cache problem: `in` is snapped in place to values that an e4m3 code times a
// power-of-two factor holds exactly (caches and new rows), and the returned inputs hold the codes with
// their (batch, kv head) factors. Both then mean the same attention, and the append stores codes exactly:
// the FP8 call's oracle is kv_oracle(in). The factors vary per sequence where a cache row belongs to one
// batch entry (contiguous, no cache_batch_idx), else per kv head only.
KVInputs fp8_form(KVInputs& in) {
  using flashattn::detail::e4m3_to_float;
  using flashattn::detail::float_to_e4m3;
  const KVConfig& c = in.cfg;
  const int64_t B = c.batch, Hk = c.heads_k, D = c.head_dim;
  const bool per_sequence = c.page_size == 0 && !c.batch_idx;
  const auto factor = [&](int64_t b, int64_t hk) { return std::ldexp(1.0, int((per_sequence ? b : 0) + hk) % 3 - 1); };
  KVInputs out = in;
  out.k_descale = HostTensor(DType::f32, {B, Hk});
  out.v_descale = HostTensor(DType::f32, {B, Hk});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hk = 0; hk < Hk; ++hk) {
      out.k_descale.set(b * Hk + hk, factor(b, hk));
      out.v_descale.set(b * Hk + hk, 2.0 * factor(b, hk));
    }
  // t: a (rows, positions, Hk, D) tensor whose row r belongs to batch entry r (or is a page: per_sequence
  // false). v: the v factors (twice k's).
  const auto snap = [&](HostTensor& t, HostTensor* codes, bool v) {
    const int64_t per_row = t.numel() / t.shape()[0];
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double d = (v ? 2.0 : 1.0) * factor(per_sequence ? i / per_row : 0, (i / D) % Hk);
      const uint8_t code = float_to_e4m3(float(t.get(i) / d));
      t.set(i, double(e4m3_to_float(code)) * d);
      if (codes) codes->set(i, double(e4m3_to_float(code)));
    }
  };
  out.k_cache = HostTensor(DType::fp8_e4m3, in.k_cache.shape());
  out.v_cache = HostTensor(DType::fp8_e4m3, in.v_cache.shape());
  snap(in.k_cache, &out.k_cache, false);
  snap(in.v_cache, &out.v_cache, true);
  if (in.k_new.present()) {
    snap(in.k_new, nullptr, false);
    snap(in.v_new, nullptr, true);
    out.k_new = in.k_new;
    out.v_new = in.v_new;
  }
  return out;
}

// Every backend that takes an FP8 cache (cpu_reference, cpu_flash, cuda_decode on a GPU) on the FP8 form
// of the forward_kvcache catalogue, against the oracle of the equivalent 16-bit problem, and its appended
// caches bit for bit equal to cpu_reference's. Rotary cases are left out: a rotated key is rounded to e4m3
// after the rotation, which the 16-bit oracle does not do (Fp8KVCache.RotaryAppendWithinOneStep covers
// them). Backends may decline what they lack (cuda_decode: f32 queries, head dims not multiples of 16).
TEST(Fp8KVCache, CatalogueOnEveryBackend) {
  const std::vector<KVConfig> cases = kvcache_cases();
  std::map<std::string, int> ran;
  for (size_t i = 0; i < cases.size(); ++i) {
    const KVConfig& c = cases[i];
    if (c.rotary_dim > 0) continue;
    SCOPED_TRACE(c.name());
    KVInputs in = make_kv_inputs(c, 9500 + uint64_t(i));
    const KVInputs in8 = fp8_form(in);
    const KVOracle oracle = kv_oracle(in);
    const KVOutputs ref8 = run_kvcache(in8, "cpu_reference", flashattn::Device::cpu());
    each_backend(
        [&](const std::string& name) {
          const KVOutputs got = run_kvcache(in8, name, device_of(name));
          ++ran[name];
          EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, c.dtype));
          EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
          EXPECT_EQ(std::memcmp(got.k_cache.data(), ref8.k_cache.data(), ref8.k_cache.nbytes()), 0);
          EXPECT_EQ(std::memcmp(got.v_cache.data(), ref8.v_cache.data(), ref8.v_cache.nbytes()), 0);
        },
        [&](const std::string& name, const std::string&) {
          const bool fp8_backend = name == "cpu_reference" || name == "cpu_flash" || name == "cuda_decode";
          const bool decode_lacks = name == "cuda_decode" && (c.dtype == DType::f32 || c.head_dim % 16 != 0);
          return !fp8_backend || decode_lacks;
        });
  }
  EXPECT_GE(ran["cpu_flash"], 20);
  if (cuda_available()) EXPECT_GE(ran["cuda_decode"], 15);
}

// Rotated appends into an FP8 cache: each backend's stored codes within one e4m3 step of cpu_reference's
// (the rotation runs in fp32 there, in fp64 in the reference, before the rounding), the unrotated part of
// the row and V bit for bit.
TEST(Fp8KVCache, RotaryAppendWithinOneStep) {
  const std::vector<KVConfig> cases = kvcache_cases();
  int ran = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const KVConfig& c = cases[i];
    if (c.rotary_dim == 0) continue;
    SCOPED_TRACE(c.name());
    KVInputs in = make_kv_inputs(c, 9700 + uint64_t(i));
    const KVInputs in8 = fp8_form(in);
    const KVOutputs ref8 = run_kvcache(in8, "cpu_reference", flashattn::Device::cpu());
    each_backend(
        [&](const std::string& name) {
          if (name == "cpu_reference") return;
          const KVOutputs got = run_kvcache(in8, name, device_of(name));
          ++ran;
          EXPECT_EQ(std::memcmp(got.v_cache.data(), ref8.v_cache.data(), ref8.v_cache.nbytes()), 0);
          for (int64_t j = 0; j < ref8.k_cache.numel(); ++j) {
            const double g = got.k_cache.get(j), r = ref8.k_cache.get(j);
            // One step of e4m3 at r: 2^(exponent - 3), and 2^-9 among the subnormals.
            const double step = std::max(std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 0x1p-6)) - 3), 0x1p-9);
            ASSERT_LE(std::fabs(g - r), step) << "k_cache " << j << ": " << g << " vs " << r;
          }
        },
        [&](const std::string& name, const std::string&) {
          return name != "cpu_flash" && !(name == "cuda_decode" && c.dtype != DType::f32 && c.head_dim % 16 == 0);
        });
  }
  EXPECT_GE(ran, 5);
}

// The append rounds each new value over its factor to the nearest e4m3 code (ties to even, saturating).
TEST(Fp8KVCache, AppendQuantisesOverTheFactor) {
  KVConfig c;
  c.dtype = DType::f32;
  c.batch = 1;
  c.heads = 2;
  c.heads_k = 1;
  c.capacity = 8;
  c.cache_seqlens = {2};
  c.seqlen_new = 1;
  KVInputs in = make_kv_inputs(c, 9);
  const float values[] = {0.3f, -1000.0f, 0.0009765625f, 3.3f};  // in range, saturating, subnormal, rounding
  for (int64_t d = 0; d < c.head_dim; ++d) in.k_new.set(d, values[d % 4]);
  in.k_cache = HostTensor(DType::fp8_e4m3, in.k_cache.shape());
  in.v_cache = HostTensor(DType::fp8_e4m3, in.v_cache.shape());
  HostTensor kd(DType::f32, {1, 1});
  kd.set(0, 0.75);
  const KVOutputs got =
      run_kvcache_via(in, "cpu_reference", flashattn::Device::cpu(), [&](const flashattn::KVCacheParams& p) {
        flashattn::KVCacheParams q = p;
        q.k_descale = kd.view();
        flashattn::forward_kvcache(q);
      });
  for (int64_t d = 0; d < c.head_dim; ++d) {
    const uint8_t want = flashattn::detail::float_to_e4m3(values[d % 4] / 0.75f);
    EXPECT_EQ(static_cast<const uint8_t*>(got.k_cache.data())[2 * c.head_dim + d], want) << d;
  }
}

// FP8 cache misuse: both caches e4m3, factors only with an e4m3 cache, (batch, heads_k) fp32.
TEST(Fp8KVCache, MisuseNamesTheArgument) {
  KVConfig c;
  c.dtype = DType::bf16;
  c.cache_seqlens = {3, 4, 5};
  const KVInputs in = make_kv_inputs(c, 10);
  HostTensor k8(DType::fp8_e4m3, in.k_cache.shape()), v8(DType::fp8_e4m3, in.v_cache.shape()),
      good(DType::f32, {c.batch, c.heads_k}), wrong(DType::f32, {c.batch, c.heads});
  const auto expect_error = [&](const std::function<void(flashattn::KVCacheParams&)>& edit, const char* name) {
    SCOPED_TRACE(name);
    try {
      run_kvcache_via(in, "cpu_reference", flashattn::Device::cpu(), [&](const flashattn::KVCacheParams& p) {
        flashattn::KVCacheParams q = p;
        edit(q);
        flashattn::forward_kvcache(q);
      });
      ADD_FAILURE() << "no error";
    } catch (const flashattn::Error& e) {
      EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expect_error([&](flashattn::KVCacheParams& p) { p.k_cache = k8.view(); }, "v_cache");        // k e4m3, v bf16
  expect_error([&](flashattn::KVCacheParams& p) { p.k_descale = good.view(); }, "k_descale");  // bf16 cache
  expect_error(
      [&](flashattn::KVCacheParams& p) {
        p.k_cache = k8.view();
        p.v_cache = v8.view();
        p.v_descale = wrong.view();
      },
      "v_descale");
}

}  // namespace
}  // namespace fa_test
