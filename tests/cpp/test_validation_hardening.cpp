// Calls that used to reach undefined behaviour (signed overflow in validation) or data races (parallel
// writes to one address), found by the sanitizer runs and the fuzzer of docs/reliability.md. Each is now
// rejected with invalid_argument and a message before anything is written; the valid neighbours of the
// new checks still run.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "api/checks.h"
#include "api/validate_common.h"
#include "attention_case.h"
#include "kvcache_case.h"

namespace fa_test {
namespace {

using flashattn::Status;

void expect_invalid(const std::function<void()>& call, const std::string& arg, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "expected " << arg << ": " << expected;
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(arg + ": expected " + expected), std::string::npos) << e.what();
  }
}

bool all_nan(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(t.get(i))) return false;
  return true;
}

// A valid dense call (B 2, Sq 5, Sk 7, H 4, Hk 2, D 16) with poisoned outputs; tests break one thing.
struct DenseCall {
  AttnInputs in = make_inputs(
      [] {
        AttnConfig c;
        c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 7, c.heads = 4, c.heads_k = 2, c.head_dim = 16;
        return c;
      }(),
      21);
  HostTensor out{in.cfg.dtype, in.q.shape()}, lse{DType::f32, {2, 4, 5}};
  HostTensor dq{in.cfg.dtype, in.q.shape()}, dk{in.cfg.dtype, in.k.shape()}, dv{in.cfg.dtype, in.v.shape()};
  flashattn::BwdParams p;

  DenseCall() {
    for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) t->poison();
    p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.dout = in.dout.view();
    p.out = out.view(), p.softmax_lse = lse.view(), p.dq = dq.view(), p.dk = dk.view(), p.dv = dv.view();
  }
  bool untouched() const { return all_nan(out) && all_nan(lse) && all_nan(dq) && all_nan(dk) && all_nan(dv); }
};

TEST(ValidationHardening, ElementCountBeyondInt64IsRejected) {
  // Zero strides keep every offset small while the element count overflows: Tensor::numel() used to.
  DenseCall c;
  c.p.q = Tensor::strided(c.in.q.data(), c.in.cfg.dtype, {int64_t(1) << 40, int64_t(1) << 40, 4, 16}, {0, 0, 16, 1});
  expect_invalid([&] { flashattn::forward(c.p); }, "q", "a number of elements that fits in int64");
  EXPECT_TRUE(c.untouched());
}

TEST(ValidationHardening, MoreDimsThanATensorHoldsAreRejectedWithoutReadingPastThem) {
  // Tensor::ndim is a plain field of a C++ caller's struct: the message used to print ndim sizes from the
  // 4-element shape array (reading the strides after it, and past the struct for large ndim).
  DenseCall c;
  c.p.q.ndim = 100000;
  expect_invalid([&] { flashattn::forward(c.p); }, "q", "4 dims");
  try {
    flashattn::forward(c.p);
  } catch (const flashattn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ndim 100000 (at most 4)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.untouched());
}

TEST(ValidationHardening, OutputsWithSharedAddressesAreRejected) {
  DenseCall c;
  c.p.out.stride[1] = 0;  // every query row of a batch entry written to the same place
  expect_invalid([&] { flashattn::forward(c.p); }, "out", "a layout in which no two elements share an address");
  DenseCall b;
  b.p.dk.stride[2] = 8;  // the two kv heads overlap by half a row
  expect_invalid([&] { flashattn::backward(b.p); }, "dk", "a layout in which no two elements share an address");
  EXPECT_TRUE(c.untouched() && b.untouched());
  DenseCall ok;
  ok.p.q.stride[1] = 0;  // an input may repeat elements (a broadcast query)
  EXPECT_NO_THROW(flashattn::forward(ok.p));
}

// Found by the C API fuzzer: an empty output whose other dims have huge strides. tensor() does not bound
// the strides of a view without elements, and the overlap check used to multiply them out (signed
// overflow). An empty output is valid: nothing is written.
TEST(ValidationHardening, EmptyOutputWithHugeStridesIsNotAnOverlap) {
  flashattn::Tensor t;
  t.dtype = DType::f32;
  t.ndim = 4;
  const int64_t shape[4] = {0, 64, 64, 16}, stride[4] = {1, int64_t(1) << 62, int64_t(1) << 61, 1};
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.stride[i] = stride[i];
  const flashattn::detail::ArgChecker c("test");
  EXPECT_NO_THROW(c.tensor(t, "out", 4, "(batch, seqlen_q, heads, head_dim)"));
  EXPECT_NO_THROW(c.no_self_overlap(t, "out"));
}

// Found by the C API fuzzer: keys of length 0 whose head stride is 2^62. Such a call is valid (every query
// sees no key: out 0, LSE +inf), and the backends computed b * batch_stride + h * head_stride for the
// empty K (signed overflow, never read). Views of a tensor without elements now get zero strides.
TEST(ValidationHardening, EmptyKeysWithHugeStridesRunOnEveryCpuBackend) {
  flashattn::Tensor empty = Tensor::strided(nullptr, DType::f32, {2, 0, 4, 16}, {19, 38, int64_t(1) << 62, 1});
  const flashattn::detail::RowsView view = flashattn::detail::rows_view(empty);
  EXPECT_EQ(view.batch_stride, 0);
  EXPECT_EQ(view.row_stride, 0);
  EXPECT_EQ(view.head_stride, 0);
  for (const char* backend : {"cpu_reference", "cpu_flash"}) {
    DenseCall c;
    c.p.k = Tensor::strided(c.in.k.data(), c.in.cfg.dtype, {2, 0, 2, 16}, {19, 38, int64_t(1) << 62, 1});
    c.p.v = Tensor::strided(c.in.v.data(), c.in.cfg.dtype, {2, 0, 2, 16}, {7, 3, int64_t(1) << 61, 1});
    c.p.options.backend = backend;
    ASSERT_NO_THROW(flashattn::forward(c.p)) << backend;
    for (int64_t i = 0; i < c.out.numel(); ++i) ASSERT_EQ(c.out.get(i), 0.0) << backend << " out[" << i << "]";
    for (int64_t i = 0; i < c.lse.numel(); ++i)
      ASSERT_EQ(c.lse.get(i), std::numeric_limits<double>::infinity()) << backend << " lse[" << i << "]";
  }
}

// A valid KV-cache call: by default two new tokens per sequence, contiguous or paged.
KVConfig cache_config(bool paged, bool batch_idx = false) {
  KVConfig c;
  c.dtype = DType::f32;
  c.batch = 2, c.seqlen_q = 1, c.heads = 4, c.heads_k = 2, c.head_dim = 16, c.capacity = 32;
  c.page_size = paged ? 8 : 0;
  c.batch_idx = batch_idx;
  c.cache_seqlens = {9, 20};
  c.seqlen_new = 2;
  return c;
}

struct CacheCall {
  KVInputs in;
  HostTensor out, lse;
  flashattn::KVCacheParams p;

  explicit CacheCall(bool paged, bool batch_idx = false) : CacheCall(cache_config(paged, batch_idx)) {}
  explicit CacheCall(const KVConfig& c) {
    in = make_kv_inputs(c, 22);
    out = HostTensor(c.dtype, in.q.shape());
    lse = HostTensor(DType::f32, {c.batch, c.heads, c.seqlen_q});
    out.poison();
    lse.poison();
    p.q = in.q.view(), p.k_cache = in.k_cache.view(), p.v_cache = in.v_cache.view();
    p.k_new = in.k_new.view(), p.v_new = in.v_new.view(), p.out = out.view(), p.softmax_lse = lse.view();
    p.cache_seqlens = in.cache_seqlens.view(), p.block_table = in.block_table.view();
    p.cache_batch_idx = in.cache_batch_idx.view();
    p.rotary_cos = in.rotary_cos.view(), p.rotary_sin = in.rotary_sin.view();
    p.options.causal = c.causal;
  }
};

// An output sharing memory with another argument gave wrong results without an error (out = k on
// cpu_flash, dk = dv in the backward, one tensor as both caches of an append).
TEST(ValidationHardening, OutputsSharingMemoryWithOtherArgumentsAreRejected) {
  const std::string shared = "memory that no other argument uses (the call writes it), got memory shared with ";
  DenseCall c;
  c.p.out = c.p.q;
  expect_invalid([&] { flashattn::forward(c.p); }, "out", shared + "q");
  DenseCall l;  // the LSE inside out's memory
  l.p.softmax_lse = Tensor::strided(l.out.data(), DType::f32, {2, 4, 5}, {20, 5, 1});
  expect_invalid([&] { flashattn::forward(l.p); }, "softmax_lse", shared + "out");
  DenseCall b;
  b.p.dv = b.p.dk;
  expect_invalid([&] { flashattn::backward(b.p); }, "dk", shared + "dv");
  DenseCall g;
  g.p.dq = g.p.dout;
  expect_invalid([&] { flashattn::backward(g.p); }, "dq", shared + "dout");
  EXPECT_TRUE(c.untouched() && b.untouched() && g.untouched());
  EXPECT_TRUE(all_nan(l.lse));

  CacheCall k(/*paged=*/false);
  const KVInputs before = k.in;
  k.p.v_cache = k.p.k_cache;
  expect_invalid([&] { flashattn::forward_kvcache(k.p); }, "k_cache", shared + "v_cache");
  EXPECT_EQ(std::memcmp(k.in.k_cache.data(), before.k_cache.data(), k.in.k_cache.nbytes()), 0);
  EXPECT_TRUE(all_nan(k.out));
  k.p.k_new = k.p.v_new = Tensor();  // K = V read-only: a strange call, but nothing is written to them
  EXPECT_NO_THROW(flashattn::forward_kvcache(k.p));
}

// Layouts whose ranges interleave without sharing an element stay valid: K and V caches as the two halves
// of dim 2 of one buffer (kv (batch, capacity, 2, heads_k, head_dim)), appended in place, give the result
// of separate caches; dq written into one half of a buffer whose other half is dout gives the plain dq.
TEST(ValidationHardening, InterleavedViewsOfOneBufferAreNotAnOverlap) {
  const KVConfig cfg = cache_config(/*paged=*/false);
  CacheCall separate(cfg);
  flashattn::forward_kvcache(separate.p);
  CacheCall packed(cfg);
  const int64_t B = cfg.batch, S = cfg.capacity, Hk = cfg.heads_k, D = cfg.head_dim;
  HostTensor kv(cfg.dtype, {B, S, 2, Hk, D});
  for (int64_t i = 0; i < B * S * Hk; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t row = i / Hk, h = i % Hk;
      kv.set(((row * 2 + 0) * Hk + h) * D + d, packed.in.k_cache.get(i * D + d));
      kv.set(((row * 2 + 1) * Hk + h) * D + d, packed.in.v_cache.get(i * D + d));
    }
  auto* base = static_cast<float*>(kv.data());
  auto half = [&](float* first) {
    return Tensor::strided(first, cfg.dtype, {B, S, Hk, D}, {S * 2 * Hk * D, 2 * Hk * D, D, 1});
  };
  packed.p.k_cache = half(base);
  packed.p.v_cache = half(base + Hk * D);
  ASSERT_NO_THROW(flashattn::forward_kvcache(packed.p));
  EXPECT_TRUE(bitwise_equal(packed.out, separate.out));
  for (int64_t i = 0; i < B * S * Hk; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t row = i / Hk, h = i % Hk;
      ASSERT_EQ(kv.get(((row * 2 + 0) * Hk + h) * D + d), separate.in.k_cache.get(i * D + d)) << i;
      ASSERT_EQ(kv.get(((row * 2 + 1) * Hk + h) * D + d), separate.in.v_cache.get(i * D + d)) << i;
    }

  DenseCall grads;
  flashattn::forward(grads.p);
  flashattn::backward(grads.p);
  DenseCall packed_grads;  // dq written into one half of a buffer whose other half holds dout
  const DType dt = grads.in.cfg.dtype;
  HostTensor dqq(dt, {2, 5, 2, 4, 16});  // (batch, seqlen_q, {dq, dout}, heads, head_dim)
  auto* dbase = static_cast<char*>(dqq.data());
  auto grad_half = [&](char* first) {
    return Tensor::strided(first, dt, {2, 5, 4, 16}, {5 * 2 * 4 * 16, 2 * 4 * 16, 16, 1});
  };
  packed_grads.p.dq = grad_half(dbase);
  packed_grads.p.dout = grad_half(dbase + 4 * 16 * flashattn::dtype_size(dt));
  for (int64_t i = 0; i < 2 * 5 * 4; ++i)
    for (int64_t d = 0; d < 16; ++d) dqq.set(((i / 4 * 2 + 1) * 4 + i % 4) * 16 + d, grads.in.dout.get(i * 16 + d));
  flashattn::forward(packed_grads.p);
  ASSERT_NO_THROW(flashattn::backward(packed_grads.p));
  for (int64_t i = 0; i < 2 * 5 * 4; ++i)
    for (int64_t d = 0; d < 16; ++d)
      ASSERT_EQ(dqq.get(((i / 4 * 2 + 0) * 4 + i % 4) * 16 + d), grads.dq.get(i * 16 + d)) << i;
}

// Pages wholly inside a sequence's left padding are never read, so their block-table entries may be
// anything (a freed page's -1): the call runs and gives the result of valid entries there.
TEST(ValidationHardening, PagesInsideTheLeftPaddingAreNotChecked) {
  const HostTensor pads = i32_tensor({8, 16});  // page size 8: all of page 0, pages 0 and 1
  CacheCall valid(/*paged=*/true), freed(/*paged=*/true);
  valid.p.cache_leftpad = pads.view();
  freed.p.cache_leftpad = pads.view();
  int32_t* table = freed.in.block_table.i32();  // (2, 4)
  table[0] = -1, table[4 + 0] = -1, table[4 + 1] = -1;
  ASSERT_NO_THROW(flashattn::forward_kvcache(valid.p));
  ASSERT_NO_THROW(flashattn::forward_kvcache(freed.p));
  EXPECT_TRUE(bitwise_equal(freed.out, valid.out));
  EXPECT_TRUE(bitwise_equal(freed.lse, valid.lse));
  table[4 + 2] = -1;  // page 2 of sequence 1 holds positions 16..23, which it attends
  expect_invalid([&] { flashattn::forward_kvcache(freed.p); }, "block_table[1][2]", "a block index in [0, ");
}

TEST(ValidationHardening, AppendingTwoSequencesIntoOneCacheRowIsRejected) {
  CacheCall c(/*paged=*/false, /*batch_idx=*/true);
  c.in.cache_batch_idx.i32()[1] = c.in.cache_batch_idx.i32()[0];
  const KVInputs before = c.in;
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "cache_batch_idx[1]",
                 "distinct cache rows when k_new/v_new are appended");
  EXPECT_EQ(std::memcmp(c.in.k_cache.data(), before.k_cache.data(), c.in.k_cache.nbytes()), 0);
  EXPECT_TRUE(all_nan(c.out));
  c.p.k_new = c.p.v_new = Tensor();  // reading one row for two sequences is fine
  EXPECT_NO_THROW(flashattn::forward_kvcache(c.p));
}

TEST(ValidationHardening, AppendingIntoAPageAnotherSequenceUsesIsRejected) {
  CacheCall c(/*paged=*/true);
  int32_t* table = c.in.block_table.i32();  // (2, 4): sequence 0 writes positions 9, 10 (its page 1)
  table[4 + 0] = table[1];                  // sequence 1 reads that page as its page 0
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "block_table[1][0]",
                 "a block no other page of the call uses, since k_new/v_new are written to block " +
                     std::to_string(table[1]) + " through block_table[0][1]");
  EXPECT_TRUE(all_nan(c.out));
  CacheCall shared_prefix(/*paged=*/true);
  int32_t* t2 = shared_prefix.in.block_table.i32();
  t2[4 + 0] = t2[0];  // page 0 (positions 0..7) shared: neither sequence writes to it
  EXPECT_NO_THROW(flashattn::forward_kvcache(shared_prefix.p));
}

TEST(ValidationHardening, CacheLengthsNearInt64MaxAreRejected) {
  CacheCall c(/*paged=*/false);
  c.p.cache_seqlens = Tensor();
  c.p.cache_seqlens_scalar = std::numeric_limits<int64_t>::max();  // + 2 new tokens used to overflow
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "cache_seqlens[0]", "a length in [0, 30]");
}

TEST(ValidationHardening, PagedCapacityBeyondInt64IsRejected) {
  // An empty batch keeps every tensor empty, so only the capacity (max_blocks * page_size) can overflow.
  CacheCall c(/*paged=*/true);
  const int64_t huge = int64_t(1) << 40;
  c.p.q = Tensor::contiguous(nullptr, DType::f32, {0, 1, 4, 16});
  c.p.out = Tensor::contiguous(nullptr, DType::f32, {0, 1, 4, 16});
  c.p.softmax_lse = Tensor();
  c.p.k_new = c.p.v_new = c.p.cache_seqlens = Tensor();
  c.p.block_table = Tensor::contiguous(nullptr, DType::i32, {0, huge});
  c.p.k_cache = c.p.v_cache = Tensor::contiguous(nullptr, DType::f32, {0, huge, 2, 16});
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "block_table",
                 "max_blocks_per_seq * page_size (cache capacity) that fits in int64");
}

TEST(ValidationHardening, RotaryWidthIsCheckedBeforeItIsDoubled) {
  CacheCall c(/*paged=*/false);
  c.p.rotary_cos = c.p.rotary_sin = Tensor::contiguous(nullptr, DType::f32, {0, int64_t(1) << 62});
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "rotary_cos", "rotary_dim / 2 in [1, head_dim / 2 = 8]");
}

TEST(ValidationHardening, RotaryTableMustReachEveryQueryPosition) {
  // Queries are rotated at cache_seqlens + i (causal): with a full cache and no new tokens they pass the
  // end of a table of `capacity` rows, which used to be read out of bounds.
  KVConfig k = cache_config(/*paged=*/false);
  k.seqlen_new = 0, k.seqlen_q = 3, k.causal = true, k.rotary_dim = 8, k.cache_seqlens = {32, 5};
  CacheCall c(k);
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "rotary_cos",
                 "at least 35 rows (the last query of sequence 0 is rotated at cache_seqlens[0] + seqlen_q - 1 = 34)");
  EXPECT_TRUE(all_nan(c.out));
  k.seqlen_q = 1, k.causal = false, k.cache_seqlens = {31, 5};  // position 31: the last row
  CacheCall ok(k);
  EXPECT_NO_THROW(flashattn::forward_kvcache(ok.p));
}

TEST(ValidationHardening, ScalarCacheLengthIsCheckedOnEveryDevice) {
  // A scalar length lives on the host, so it is checked for CUDA tensors too (whose index tensors are not
  // read). Only validation runs here: a build without CUDA has no backend for CUDA tensors, so the views'
  // host memory is never touched; with CUDA compiled in, an accepted call would launch on it.
  if (flashattn::built_with_cuda()) GTEST_SKIP() << "needs a build without CUDA backends";
  KVConfig k = cache_config(/*paged=*/false);
  k.seqlen_new = 0, k.seqlen_q = 1, k.rotary_dim = 8;
  CacheCall c(k);
  for (Tensor* t : {&c.p.q, &c.p.k_cache, &c.p.v_cache, &c.p.out, &c.p.softmax_lse, &c.p.rotary_cos, &c.p.rotary_sin})
    t->device = flashattn::Device::cuda(0);
  c.p.cache_seqlens = Tensor();
  c.p.cache_seqlens_scalar = -1;  // the whole cache: the query is rotated at position 32, past the table
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "rotary_cos",
                 "at least 33 rows (the last query of sequence 0 is rotated at cache_seqlens[0] = 32)");
  c.p.cache_seqlens_scalar = 40;
  expect_invalid([&] { flashattn::forward_kvcache(c.p); }, "cache_seqlens", "a length in [0, 32]");
  c.p.cache_seqlens_scalar = 31;
  try {
    flashattn::forward_kvcache(c.p);
    ADD_FAILURE() << "no backend should run CUDA tensors in this build";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported) << e.what();  // valid: only the dispatch refuses it
  }
}

}  // namespace
}  // namespace fa_test
