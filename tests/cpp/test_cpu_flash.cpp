// cpu_flash beyond the shared catalogue: tile-boundary and long sequences, the decode path and its key
// splits, the exact dropout mask, strided views, determinism and both backward schedules, and that the
// backend accepts every catalogue case.

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention_case.h"
#include "case_catalog.h"
#include "common/philox.h"
#include "criterion.h"
#include "kvcache_case.h"
#include "naive_lowp.h"

namespace fa_test {
namespace {

const char* const kFlash = "cpu_flash";

void expect_forward_ok(const AttnConfig& cfg, uint64_t seed) {
  const AttnInputs in = make_inputs(cfg, seed);
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  const FwdOutputs got = run_forward(in, kFlash, Device::cpu());
  EXPECT_TRUE(within_criterion("out", got.out, ref.out.to_double(), naive.out, cfg.dtype)) << cfg.name();
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, ref.lse.to_double(), naive.lse, DType::f32)) << cfg.name();
}

void expect_backward_ok(const AttnConfig& cfg, uint64_t seed) {
  const AttnInputs in = make_inputs(cfg, seed);
  const BwdOutputs ref = reference_backward(in);
  const NaiveOutputs naive = naive_lowp(in, true);
  const BwdOutputs got = run_backward(in, run_forward(in, kFlash, Device::cpu()), kFlash, Device::cpu());
  EXPECT_TRUE(within_criterion("dq", got.dq, ref.dq.to_double(), naive.dq, cfg.dtype)) << cfg.name();
  EXPECT_TRUE(within_criterion("dk", got.dk, ref.dk.to_double(), naive.dk, cfg.dtype)) << cfg.name();
  EXPECT_TRUE(within_criterion("dv", got.dv, ref.dv.to_double(), naive.dv, cfg.dtype)) << cfg.name();
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Runs `body` with `threads` OpenMP threads, restoring the previous setting.
template <typename F>
void with_threads(int threads, F&& body) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  body();
  omp_set_num_threads(before);
}

AttnConfig small(DType dt, int64_t sq, int64_t sk) {
  AttnConfig c;
  c.dtype = dt;
  c.batch = 1;
  c.heads = c.heads_k = 2;
  c.head_dim = 64;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  return c;
}

// Forward tiles are 64 keys by the widest of 384/192/96/48 query rows that leaves 4 tiles per thread,
// backward tiles 96 x 64 (tile_config.h): one below, at and above each boundary. One kv head on many
// threads gets the narrowest forward tiles, four on one thread the widest.
TEST(CpuFlashTiles, ForwardAtTileBoundaries) {
  int n = 0;
  auto run = [&](int64_t heads, int64_t sq, int64_t sk) {
    AttnConfig c = small(n % 3 == 0 ? DType::f32 : n % 3 == 1 ? DType::f16 : DType::bf16, sq, sk);
    c.heads = c.heads_k = heads;
    c.causal = n % 2 == 1;
    expect_forward_ok(c, 100 + uint64_t(n++));
  };
  with_threads(16, [&] {
    for (int64_t sq : {47, 48, 49, 95, 96, 97})
      for (int64_t sk : {63, 64, 65, 127, 128, 129}) run(1, sq, sk);
  });
  with_threads(1, [&] {
    for (int64_t sq : {383, 384, 385, 769})
      for (int64_t sk : {63, 64, 65, 129}) run(4, sq, sk);
  });
}

TEST(CpuFlashTiles, BackwardAtTileBoundaries) {
  int n = 0;
  for (int64_t sq : {95, 96, 97, 193})
    for (int64_t sk : {63, 64, 65, 129}) {
      AttnConfig c = small(n % 2 ? DType::bf16 : DType::f16, sq, sk);
      c.causal = n % 3 == 0;
      expect_backward_ok(c, 200 + uint64_t(n++));
    }
}

// GQA packs the heads of a group into the query rows of a tile: rows = group * seqlen_q crosses the tile
// boundaries even when seqlen_q does not.
TEST(CpuFlashTiles, PackedGroupRowsAtTileBoundaries) {
  for (int64_t sq : {24, 48, 49}) {
    AttnConfig c = small(DType::bf16, sq, 70);
    c.heads = 8;
    c.heads_k = 2;
    c.causal = sq == 49;
    expect_forward_ok(c, 300 + uint64_t(sq));
    expect_backward_ok(c, 400 + uint64_t(sq));
  }
}

TEST(CpuFlashLong, OneHead1000x3000) {
  AttnConfig c = small(DType::bf16, 1000, 3000);
  c.heads = c.heads_k = 1;
  expect_forward_ok(c, 11);
  expect_backward_ok(c, 12);
  c.dtype = DType::f16;
  c.causal = true;
  c.window_left = 700;
  expect_forward_ok(c, 13);
  expect_backward_ok(c, 14);
}

// Few rows per kv head take the decode path (up to 8 packed rows), split over keys when there are
// fewer jobs than threads; 9 rows take the tiles.
TEST(CpuFlashDecode, DecodeAndTiledAroundTheThreshold) {
  const int64_t shapes[][3] = {{8, 1, 1}, {4, 1, 2}, {3, 1, 3}, {1, 1, 9}};  // heads, heads_k, seqlen_q
  int n = 0;
  for (const auto& s : shapes)
    for (int variant = 0; variant < 3; ++variant) {
      AttnConfig c = small(variant == 2 ? DType::f32 : DType::f16, s[2], 300);
      c.heads = s[0];
      c.heads_k = s[1];
      c.causal = variant == 1;
      c.alibi = variant == 1;
      if (variant == 2) {
        c.softcap = 3.0f;
        c.window_left = 100;
        c.window_right = 20;
        c.dropout_p = 0.3f;
      }
      expect_forward_ok(c, 500 + uint64_t(n++));
    }
}

TEST(CpuFlashDecode, SplitKeysAreMergedExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    with_threads(threads, [&] {
      AttnConfig c = small(DType::bf16, 1, 5000);
      c.heads = 8;
      c.heads_k = 2;
      expect_forward_ok(c, 600);
      c.seqlen_q = 2;
      c.causal = true;
      c.window_left = 3000;
      expect_forward_ok(c, 601);
    });
  }
}

// KV-cache calls on both engines and both cache kinds: a paged cache (odd page size) with enough query
// rows for tiles, rotary and appends; long caches with few rows, split over keys.
testing::AssertionResult cache_matches(const char* what, const HostTensor& got, const HostTensor& ref, bool rotary) {
  const double unit = got.dtype() == DType::bf16 ? 1.0 / 128 : got.dtype() == DType::f16 ? 1.0 / 1024 : 1e-6;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.get(i), r = ref.get(i), tol = rotary ? unit * std::max(1.0, std::fabs(r)) : 0.0;
    if (!(std::fabs(g - r) <= tol))
      return testing::AssertionFailure() << what << "[" << i << "] = " << g << " vs " << r;
  }
  return testing::AssertionSuccess();
}

void expect_kvcache_ok(const KVConfig& c, uint64_t seed) {
  const KVInputs in = make_kv_inputs(c, seed);
  const KVOracle oracle = kv_oracle(in);
  const KVOutputs got = run_kvcache(in, kFlash, Device::cpu());
  EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, c.dtype)) << c.name();
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32)) << c.name();
  EXPECT_TRUE(cache_matches("k_cache", got.k_cache, oracle.appended.k_cache, c.rotary_dim > 0)) << c.name();
  EXPECT_TRUE(cache_matches("v_cache", got.v_cache, oracle.appended.v_cache, false)) << c.name();
}

TEST(CpuFlashKVCache, TiledPagedWithRotaryAndAppend) {
  KVConfig c;
  c.dtype = DType::bf16;
  c.batch = 3;
  c.heads = 8;
  c.heads_k = 2;
  c.seqlen_q = c.seqlen_new = 16;
  c.page_size = 7;
  c.capacity = 280;
  c.cache_seqlens = {50, 0, 200};
  c.rotary_dim = 32;
  c.rotary_interleaved = false;
  c.causal = true;
  expect_kvcache_ok(c, 1);
  c.causal = false;
  c.window_left = 30;
  c.window_right = 5;
  c.softcap = 10.0f;
  c.leftpad = true;
  c.page_size = 0;
  expect_kvcache_ok(c, 2);
}

TEST(CpuFlashKVCache, LongDecodeSplitOverKeys) {
  for (int threads : {1, 4}) {
    with_threads(threads, [&] {
      KVConfig c;
      c.dtype = DType::f16;
      c.batch = 2;
      c.heads = 8;
      c.heads_k = 4;
      c.capacity = 3072;
      c.cache_seqlens = {3000, 700};
      c.seqlen_new = 1;
      c.page_size = 64;
      c.alibi = true;
      expect_kvcache_ok(c, 3);
      c.page_size = 0;
      c.batch_idx = true;
      c.leftpad = true;
      c.seqlen_q = 2;
      c.causal = true;
      expect_kvcache_ok(c, 4);
    });
  }
}

// With V = identity (seqlen_k == head_dim), out[i][j] = P_ij * keep_ij / (1 - p): zero exactly where
// element (i, j) is dropped. The kept set must equal common/philox.h's, element for element, in the
// tiled and the decode path and for every head of a GQA group.
TEST(CpuFlashDropout, KeepMaskIsTheReferenceMask) {
  for (int64_t sq : {1, 3, 70}) {
    AttnConfig c = small(DType::f32, sq, 64);
    c.batch = 2;
    c.heads = 4;
    c.heads_k = 2;
    c.dropout_p = 0.4f;
    c.dropout_seed = 0x123456789abcULL;
    c.dropout_offset = 0x500000007ULL;
    AttnInputs in = make_inputs(c, 700);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t j = 0; j < 64; ++j)
        for (int64_t hk = 0; hk < 2; ++hk)
          for (int64_t d = 0; d < 64; ++d) in.v.set(((b * 64 + j) * 2 + hk) * 64 + d, d == j ? 1.0 : 0.0);
    const FwdOutputs got = run_forward(in, kFlash, Device::cpu());
    const flashattn::detail::DropoutParams dp{c.dropout_p, c.dropout_seed, c.dropout_offset};
    int64_t mismatches = 0, dropped = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t j = 0; j < 64; ++j) {
            const bool keep = flashattn::detail::dropout_keep(dp, b, h, 4, i, j);
            const double o = got.out.get(((b * sq + i) * 4 + h) * 64 + j);
            mismatches += keep != (o != 0.0);
            dropped += !keep;
          }
    EXPECT_EQ(mismatches, 0) << "seqlen_q " << sq;
    EXPECT_GT(dropped, 0);
  }
}

// q/k/v/out/dout/dq/dk/dv as views into larger buffers (gaps between heads, rows and batches): results
// bitwise equal to the contiguous run, and the gaps untouched.
struct Strided {
  HostTensor buf;
  Tensor view;
};

Strided strided_copy(const HostTensor& src, int64_t gap, double fill) {
  const std::vector<int64_t>& s = src.shape();  // (B, S, H, D)
  const int64_t hs = s[3] + gap, rs = s[2] * hs + gap, bs = s[1] * rs + gap;
  Strided t{HostTensor(src.dtype(), {s[0] * bs}), {}};
  t.buf.fill(fill);
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t r = 0; r < s[1]; ++r)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d)
          t.buf.set(b * bs + r * rs + h * hs + d, src.get(((b * s[1] + r) * s[2] + h) * s[3] + d));
  t.view = Tensor::strided(t.buf.data(), src.dtype(), {s[0], s[1], s[2], s[3]}, {bs, rs, hs, 1});
  return t;
}

HostTensor gather(const Strided& t) {
  const Tensor& v = t.view;
  HostTensor out(v.dtype, {v.shape[0], v.shape[1], v.shape[2], v.shape[3]});
  int64_t n = 0;
  for (int64_t b = 0; b < v.shape[0]; ++b)
    for (int64_t r = 0; r < v.shape[1]; ++r)
      for (int64_t h = 0; h < v.shape[2]; ++h)
        for (int64_t d = 0; d < v.shape[3]; ++d)
          out.set(n++, t.buf.get(b * v.stride[0] + r * v.stride[1] + h * v.stride[2] + d));
  return out;
}

// Elements of the buffer outside the view still hold `fill`.
bool gaps_untouched(const Strided& t, double fill) {
  const HostTensor inside = gather(t);
  int64_t changed = 0;
  for (int64_t i = 0; i < t.buf.numel(); ++i) changed += t.buf.get(i) != fill;
  int64_t inside_changed = 0;
  for (int64_t i = 0; i < inside.numel(); ++i) inside_changed += inside.get(i) != fill;
  return changed == inside_changed;
}

TEST(CpuFlashLayout, StridedViewsGiveTheContiguousResult) {
  AttnConfig c = small(DType::bf16, 77, 130);
  c.batch = 2;
  c.heads = 4;
  c.heads_k = 2;
  c.causal = true;
  const AttnInputs in = make_inputs(c, 800);
  const FwdOutputs fwd = run_forward(in, kFlash, Device::cpu());
  const BwdOutputs bwd = run_backward(in, fwd, kFlash, Device::cpu());

  const double fill = 7.0;
  Strided q = strided_copy(in.q, 8, 0), k = strided_copy(in.k, 16, 0), v = strided_copy(in.v, 24, 0);
  Strided dout = strided_copy(in.dout, 40, 0);
  // Outputs: every element of the buffer starts as `fill`, inside the view and in the gaps.
  Strided out = strided_copy(in.q, 8, fill), dq = strided_copy(in.q, 8, fill);
  Strided dk = strided_copy(in.k, 32, fill), dv = strided_copy(in.v, 16, fill);
  for (Strided* t : {&out, &dq, &dk, &dv}) t->buf.fill(fill);
  HostTensor lse(DType::f32, {c.batch, c.heads, c.seqlen_q});
  flashattn::FwdParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out.view;
  p.softmax_lse = lse.view();
  p.options.causal = true;
  p.options.backend = kFlash;
  flashattn::forward(p);
  EXPECT_TRUE(same_bits(gather(out), fwd.out));
  EXPECT_TRUE(same_bits(lse, fwd.lse));
  EXPECT_TRUE(gaps_untouched(out, fill));

  flashattn::BwdParams bp;
  static_cast<flashattn::FwdParams&>(bp) = p;
  bp.dout = dout.view;
  bp.dq = dq.view;
  bp.dk = dk.view;
  bp.dv = dv.view;
  flashattn::backward(bp);
  EXPECT_TRUE(same_bits(gather(dq), bwd.dq));
  EXPECT_TRUE(same_bits(gather(dk), bwd.dk));
  EXPECT_TRUE(same_bits(gather(dv), bwd.dv));
  EXPECT_TRUE(gaps_untouched(dq, fill));
  EXPECT_TRUE(gaps_untouched(dk, fill));
  EXPECT_TRUE(gaps_untouched(dv, fill));
}

// A NaN in a key every row sees (docs/reliability.md): the rows' LSE is NaN, as the reference's, in the
// tiled and the decode engine; a +inf LSE made the backward's P = exp(s - LSE) 0, and dv kept the NaN in
// one key's row only.
TEST(CpuFlashNumerics, NanLogitGivesNanLseAndNanGradients) {
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{20, 70}, {4, 6}}) {
    AttnConfig c = small(DType::f32, sq, sk);
    c.heads = c.heads_k = 1;
    c.head_dim = 16;
    SCOPED_TRACE(c.name());
    AttnInputs in = make_inputs(c, 901);
    in.k.set(2 * c.head_dim + 5, std::numeric_limits<double>::quiet_NaN());  // key 2, dim 5 (batch 0)
    const FwdOutputs fwd = run_forward(in, kFlash, Device::cpu());
    for (int64_t i = 0; i < sq; ++i) EXPECT_TRUE(std::isnan(fwd.lse.get(i))) << "softmax_lse row " << i;
    const BwdOutputs got = run_backward(in, fwd, kFlash, Device::cpu());
    for (int64_t e = 0; e < got.dv.numel() / c.batch; ++e)
      ASSERT_TRUE(std::isnan(got.dv.get(e))) << "dv element " << e << " of batch 0 (every key is seen by a NaN row)";
  }
}

TEST(CpuFlashBackward, RunTwiceIsBitwiseIdentical) {
  AttnConfig c = small(DType::f16, 150, 200);
  c.batch = 2;
  c.heads = 4;
  c.heads_k = 1;
  c.dropout_p = 0.2f;
  c.softcap = 5.0f;
  const AttnInputs in = make_inputs(c, 900);
  const FwdOutputs fwd = run_forward(in, kFlash, Device::cpu());
  const BwdOutputs a = run_backward(in, fwd, kFlash, Device::cpu(), true);
  const BwdOutputs b = run_backward(in, fwd, kFlash, Device::cpu(), true);
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
}

// Backward runs one thread per (sequence, kv head) when there are at least twice as many of those as
// threads, and otherwise splits dK/dV and dQ into two passes; both must be right and, since they sum in
// the same order, give the same bits whatever the thread count.
TEST(CpuFlashBackward, BothSchedulesAgreeBitwise) {
  for (const bool varlen : {false, true}) {
    AttnConfig c = small(DType::bf16, 130, 150);
    c.heads = 6;
    c.heads_k = 3;
    c.window_left = 40;
    c.alibi = true;
    if (varlen) {
      c.varlen_q = {60, 0, 131};
      c.varlen_k = {90, 17, 70};
    }
    const AttnInputs in = make_inputs(c, 1000);
    const FwdOutputs fwd = run_forward(in, kFlash, Device::cpu());
    BwdOutputs one, many;
    with_threads(1, [&] { one = run_backward(in, fwd, kFlash, Device::cpu()); });    // fused
    with_threads(16, [&] { many = run_backward(in, fwd, kFlash, Device::cpu()); });  // split
    EXPECT_TRUE(same_bits(one.dq, many.dq));
    EXPECT_TRUE(same_bits(one.dk, many.dk));
    EXPECT_TRUE(same_bits(one.dv, many.dv));
    with_threads(16, [&] { expect_backward_ok(c, 1000); });
  }
}

// The forward / backward parameters run_forward and run_backward build, for query_backends.
flashattn::BwdParams params_of(const AttnInputs& in, HostTensor& out, HostTensor& lse, HostTensor& grads) {
  const AttnConfig& c = in.cfg;
  flashattn::BwdParams p;
  fill_call_options(p, in);
  p.q = in.q.view();
  p.k = in.k.view();
  p.v = in.v.view();
  p.cu_seqlens_q = in.cu_seqlens_q.view();
  p.cu_seqlens_k = in.cu_seqlens_k.view();
  p.options.alibi_slopes = in.alibi.view();
  out = HostTensor(c.dtype, in.q.shape());
  lse = c.varlen() ? HostTensor(DType::f32, {c.heads, in.q.shape()[0]})
                   : HostTensor(DType::f32, {c.batch, c.heads, c.seqlen_q});
  grads = HostTensor(c.dtype, {in.q.numel() + 2 * in.k.numel()});
  p.out = out.view();
  p.softmax_lse = lse.view();
  p.dout = in.dout.view();
  auto part = [&](const HostTensor& like, int64_t at) {
    Tensor t = like.view();
    t.data = static_cast<char*>(grads.data()) + at * flashattn::dtype_size(c.dtype);
    return t;
  };
  p.dq = part(in.q, 0);
  p.dk = part(in.k, in.q.numel());
  p.dv = part(in.v, in.q.numel() + in.k.numel());
  return p;
}

testing::AssertionResult flash_supported(const std::vector<flashattn::BackendSupport>& answers) {
  for (const flashattn::BackendSupport& s : answers)
    if (s.name == kFlash) return s.supported ? testing::AssertionSuccess() : testing::AssertionFailure() << s.reason;
  return testing::AssertionFailure() << "cpu_flash is not registered";
}

TEST(CpuFlashSupport, AcceptsEveryCatalogueCase) {
  std::vector<AttnConfig> all = forward_cases();
  const std::vector<AttnConfig> bwd = backward_cases();
  all.insert(all.end(), bwd.begin(), bwd.end());
  for (const AttnConfig& c : all) {
    const AttnInputs in = make_inputs(c, 1);
    HostTensor out, lse, grads;
    const flashattn::BwdParams p = params_of(in, out, lse, grads);
    EXPECT_TRUE(flash_supported(flashattn::query_backends(static_cast<const flashattn::FwdParams&>(p)))) << c.name();
    EXPECT_TRUE(flash_supported(flashattn::query_backends(p))) << c.name();
  }
  // KV-cache cases: running them forced to cpu_flash throws Status::unsupported if supports() refuses.
  for (const KVConfig& c : kvcache_cases())
    EXPECT_NO_THROW(run_kvcache(make_kv_inputs(c, 2), kFlash, Device::cpu())) << c.name();
}

}  // namespace
}  // namespace fa_test
