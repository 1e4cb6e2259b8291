// One test per rejected argument: the call throws flashattn::Error with the right status and a message
// naming the argument, what was expected and what was given, and writes nothing to any output.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "attention_case.h"
#include "kvcache_case.h"

namespace fa_test {
namespace {

using flashattn::Status;

// A valid dense forward call on the CPU whose outputs are poisoned; each test breaks one thing.
struct FwdFixture {
  AttnInputs in;
  HostTensor out, lse;
  flashattn::BwdParams p;  // a superset of FwdParams, so one fixture serves both directions
  HostTensor dq, dk, dv;

  // page_size > 0 or seqused: a varlen forward with paged keys (pages of 2: block_table (2, 3), 6 blocks)
  // or seqused_k (attention_case.h).
  explicit FwdFixture(bool varlen = false, int64_t page_size = 0, bool seqused = false) {
    AttnConfig c;
    c.dtype = DType::f16;
    c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 7, c.heads = 4, c.heads_k = 2, c.head_dim = 16;
    if (varlen) {
      c.varlen_q = {2, 3};
      c.varlen_k = {4, 3};
      c.page_size = page_size;
      c.seqused_k = seqused;
    }
    in = make_inputs(c, 1);
    out = HostTensor(c.dtype, in.q.shape());
    lse = varlen ? HostTensor(DType::f32, {4, 5}) : HostTensor(DType::f32, {2, 4, 5});
    dq = HostTensor(c.dtype, in.q.shape());
    dk = HostTensor(c.dtype, in.k.shape());
    dv = HostTensor(c.dtype, in.v.shape());
    for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) t->poison();
    p.q = in.q.view();
    p.k = in.k.view();
    p.v = in.v.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.dout = in.dout.view();
    p.dq = dq.view();
    p.dk = dk.view();
    p.dv = dv.view();
    if (varlen) {
      p.cu_seqlens_q = in.cu_seqlens_q.view();
      p.cu_seqlens_k = in.cu_seqlens_k.view();
      p.max_seqlen_q = 3;
      p.max_seqlen_k = 4;
    }
    if (in.call_k.present()) {
      p.k = in.call_k.view();
      p.v = in.call_v.view();
      p.cu_seqlens_k = in.call_cu_seqlens_k.view();
      p.max_seqlen_k = in.call_max_seqlen_k;
      p.block_table = in.block_table.view();
      p.seqused_k = in.seqused_k.view();
    }
  }

  bool outputs_untouched() const {
    for (const HostTensor* t : {&out, &lse, &dq, &dk, &dv})
      for (int64_t i = 0; i < t->numel(); ++i)
        if (!std::isnan(t->get(i))) return false;
    return true;
  }
};

void expect_error(const std::function<void()>& call, Status status, std::vector<std::string> fragments) {
  try {
    call();
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message: " << e.what() << "\nmissing: " << f;
  }
}

#define FWD_ERROR_TEST(test_name, varlen, mutate, status, ...)           \
  TEST(ForwardErrors, test_name) {                                       \
    FwdFixture f(varlen);                                                \
    auto& p = f.p;                                                       \
    mutate;                                                              \
    expect_error([&] { flashattn::forward(p); }, status, {__VA_ARGS__}); \
    EXPECT_TRUE(f.outputs_untouched());                                  \
  }

FWD_ERROR_TEST(MissingQ, false, p.q = Tensor(), Status::invalid_argument, "forward: q:", "expected a tensor",
               "got none")
FWD_ERROR_TEST(WrongRank, false, p.q.ndim = 3, Status::invalid_argument,
               "q:", "expected 4 dims (batch, seqlen_q, heads, head_dim)", "got 3 dims")
FWD_ERROR_TEST(IntegerDtype, false, p.q.dtype = DType::i32, Status::invalid_argument, "q:", "f32, f16 or bf16",
               "got i32")
FWD_ERROR_TEST(MixedDtype, false, p.k.dtype = DType::bf16, Status::invalid_argument, "k:", "dtype f16 (same as q)",
               "got bf16")
FWD_ERROR_TEST(MixedDevice, false, p.v.device = flashattn::Device::cuda(0), Status::invalid_argument,
               "v:", "device cpu (same as q)", "got cuda:0")
FWD_ERROR_TEST(NonContiguousLastDim, false, p.q.stride[3] = 2, Status::invalid_argument, "q:", "contiguous last dim",
               "got stride 2")
FWD_ERROR_TEST(HeadsNotDivisible, false, (p.k.shape[2] = 3, p.v.shape[2] = 3), Status::invalid_argument,
               "k:", "heads_k dividing the query heads (4)", "heads_k = 3")
FWD_ERROR_TEST(KvHeadsWithoutQueryHeads, false, (p.q.shape[2] = 0, p.out.shape[2] = 0, p.softmax_lse.shape[1] = 0),
               Status::invalid_argument, "k:", "heads_k = 0 when q has no heads", "heads_k = 2")
FWD_ERROR_TEST(HeadDimZero, false, (p.q.shape[3] = 0), Status::invalid_argument,
               "q:", "head_dim (last dim) in [1, 256]", "got 0")
FWD_ERROR_TEST(HeadDimTooLarge, false, (p.q.shape[3] = 257), Status::invalid_argument,
               "q:", "head_dim (last dim) in [1, 256]", "got 257")
FWD_ERROR_TEST(KeyBatchMismatch, false, p.k.shape[0] = 3, Status::invalid_argument,
               "k:", "expected shape [2, 7, 2, 16]", "got shape [3, 7, 2, 16]")
FWD_ERROR_TEST(ValueShapeMismatch, false, p.v.shape[1] = 6, Status::invalid_argument, "v:", "shape [2, 7, 2, 16]",
               "got shape [2, 6, 2, 16]")
FWD_ERROR_TEST(OutShapeMismatch, false, p.out.shape[1] = 4, Status::invalid_argument,
               "out:", "shape [2, 5, 4, 16] (same as q)", "got shape [2, 4, 4, 16]")
FWD_ERROR_TEST(OutDtypeMismatch, false, p.out.dtype = DType::f32, Status::invalid_argument,
               "out:", "dtype f16 (same as q)", "got f32")
FWD_ERROR_TEST(LseShape, false, p.softmax_lse.shape[2] = 6, Status::invalid_argument,
               "softmax_lse:", "shape [2, 4, 5] (batch, heads, seqlen_q)", "got shape [2, 4, 6]")
FWD_ERROR_TEST(LseDtype, false, p.softmax_lse.dtype = DType::f16, Status::invalid_argument, "softmax_lse:", "dtype f32",
               "got f16")
FWD_ERROR_TEST(WindowLeftBelowMinusOne, false, p.options.window_left = -2, Status::invalid_argument,
               "window_size[0] (left):", "-1 (unbounded) or >= 0", "got -2")
FWD_ERROR_TEST(WindowRightBelowMinusOne, false, p.options.window_right = -5, Status::invalid_argument,
               "window_size[1] (right):", "got -5")
FWD_ERROR_TEST(NegativeSoftcap, false, p.options.softcap = -1.0f, Status::invalid_argument,
               "softcap:", "finite value >= 0", "got -1")
FWD_ERROR_TEST(NanSoftcap, false, p.options.softcap = std::numeric_limits<float>::quiet_NaN(), Status::invalid_argument,
               "softcap:", "got nan")
FWD_ERROR_TEST(NanScale, false, p.options.softmax_scale = std::numeric_limits<float>::quiet_NaN(),
               Status::invalid_argument, "softmax_scale:", "a finite value", "got nan")
FWD_ERROR_TEST(DropoutOne, false, p.dropout_p = 1.0f, Status::invalid_argument, "dropout_p:", "a probability in [0, 1)",
               "got 1")
FWD_ERROR_TEST(DropoutNegative, false, p.dropout_p = -0.1f, Status::invalid_argument, "dropout_p:", "got -0.1")
FWD_ERROR_TEST(NullDataWithElements, false, p.k.data = nullptr, Status::invalid_argument,
               "k:", "non-null data for 448 elements", "got nullptr")
FWD_ERROR_TEST(NegativeSize, false, p.q.shape[1] = -1, Status::invalid_argument, "q:", "non-negative sizes",
               "[2, -1, 4, 16]")
FWD_ERROR_TEST(OffsetOverflow, false, p.q.stride[0] = std::numeric_limits<int64_t>::max() / 2, Status::invalid_argument,
               "q:", "element offsets that fit in int64")
FWD_ERROR_TEST(MisalignedPointer, false, p.q.data = static_cast<char*>(p.q.data) + 1, Status::invalid_argument,
               "q:", "data aligned to 2 bytes", "misaligned")
FWD_ERROR_TEST(UnknownBackend, false, p.options.backend = "warp_drive", Status::invalid_argument,
               "options.backend:", "expected one of {", "got 'warp_drive'")
HostTensor g_slopes2(DType::f32, {2}), g_slopes_f16(DType::f16, {4});
FWD_ERROR_TEST(AlibiShape, false, p.options.alibi_slopes = g_slopes2.view(), Status::invalid_argument,
               "alibi_slopes:", "shape [4] (heads)", "got shape [2]")
FWD_ERROR_TEST(AlibiDtype, false, p.options.alibi_slopes = g_slopes_f16.view(), Status::invalid_argument,
               "alibi_slopes:", "dtype f32", "got f16")
FWD_ERROR_TEST(VarlenOnlyOneCuSeqlens, true, p.cu_seqlens_k = Tensor(), Status::invalid_argument,
               "cu_seqlens_k:", "both cu_seqlens_q and cu_seqlens_k", "only one of them")
FWD_ERROR_TEST(VarlenCuSeqlensDtype, true, p.cu_seqlens_q.dtype = DType::f32, Status::invalid_argument,
               "cu_seqlens_q:", "dtype i32", "got f32")
FWD_ERROR_TEST(VarlenCuSeqlensStart, true, f.in.cu_seqlens_q.i32()[0] = 1, Status::invalid_argument,
               "cu_seqlens_q:", "cu_seqlens[0] == 0", "got 1")
FWD_ERROR_TEST(VarlenNotMonotonic, true,
               (f.in.cu_seqlens_k.i32()[1] = 5, f.in.cu_seqlens_k.i32()[2] = 4, p.max_seqlen_k = 10),
               Status::invalid_argument, "cu_seqlens_k:", "non-decreasing", "cu_seqlens[2] = 4 < cu_seqlens[1] = 5")
FWD_ERROR_TEST(VarlenTotalMismatch, true, f.in.cu_seqlens_q.i32()[2] = 4, Status::invalid_argument,
               "cu_seqlens_q:", "equal to the number of rows (5)", "got 4")
FWD_ERROR_TEST(VarlenLongerThanMax, true, p.max_seqlen_q = 2, Status::invalid_argument,
               "cu_seqlens_q:", "sequence lengths <= max_seqlen_q = 2", "length 3 for sequence 1")
FWD_ERROR_TEST(VarlenNegativeMax, true, p.max_seqlen_k = -1, Status::invalid_argument, "max_seqlen_k:", "a value >= 0",
               "got -1")
FWD_ERROR_TEST(CpuDeviceIndex, false, p.q.device.index = 3, Status::invalid_argument,
               "q:", "device index 0 for a CPU tensor", "got cpu:3")
FWD_ERROR_TEST(NegativeCudaDeviceIndex, false, p.q.device = flashattn::Device::cuda(-7), Status::invalid_argument,
               "q:", "a CUDA device index >= 0", "got -7")
FWD_ERROR_TEST(VarlenLseShape, true, p.softmax_lse = f.out.view(), Status::invalid_argument,
               "softmax_lse:", "2 dims (heads, total_q)", "got 3 dims")
FWD_ERROR_TEST(VarlenCuSeqlensSizes, true, p.cu_seqlens_k.shape[0] = 2, Status::invalid_argument,
               "cu_seqlens_k:", "shape [3] (same as cu_seqlens_q)", "got shape [2]")

#define PAGED_ERROR_TEST(test_name, page_size, seqused, mutate, ...)                       \
  TEST(PagedVarlenErrors, test_name) {                                                     \
    FwdFixture f(true, page_size, seqused);                                                \
    auto& p = f.p;                                                                         \
    mutate;                                                                                \
    expect_error([&] { flashattn::forward(p); }, Status::invalid_argument, {__VA_ARGS__}); \
    EXPECT_TRUE(f.outputs_untouched());                                                    \
  }

TEST(PagedVarlenErrors, FixtureIsValid) {
  for (auto [page, seqused] :
       {std::pair{int64_t(2), false}, std::pair{int64_t(0), true}, std::pair{int64_t(2), true}}) {
    FwdFixture f(true, page, seqused);
    EXPECT_NO_THROW(flashattn::forward(f.p));
  }
}
PAGED_ERROR_TEST(BlockTableOnDenseCall, 2, false, (p.cu_seqlens_q = Tensor(), p.cu_seqlens_k = Tensor()),
                 "forward: block_table:", "a varlen call (cu_seqlens_q and cu_seqlens_k given)", "got a dense call")
PAGED_ERROR_TEST(SequsedOnDenseCall, 0, true, (p.cu_seqlens_q = Tensor(), p.cu_seqlens_k = Tensor()),
                 "seqused_k:", "a varlen call", "got a dense call")
PAGED_ERROR_TEST(PagedKeysOfThreeDims, 2, false, p.k.ndim = 3,
                 "k:", "4 dims (num_blocks, page_size, heads_k, head_dim)", "got 3 dims")
PAGED_ERROR_TEST(PagedValuesShape, 2, false, p.v.shape[0] = 5, "v:", "shape [6, 2, 2, 16] (same as k)",
                 "got shape [5, 2, 2, 16]")
PAGED_ERROR_TEST(BlockTableDtype, 2, false, p.block_table.dtype = DType::f32, "block_table:", "dtype i32", "got f32")
PAGED_ERROR_TEST(BlockTableBatch, 2, false, p.block_table.shape[0] = 1,
                 "block_table:", "shape [2, max_blocks_per_seq] (batch of cu_seqlens_q)", "got shape [1, 3]")
PAGED_ERROR_TEST(BlockOutOfRange, 2, false, f.in.block_table.i32()[4] = 6,
                 "block_table[1][1]:", "a block index in [0, 6)", "got 6")
PAGED_ERROR_TEST(SequenceBeyondBlockTable, 2, false, p.block_table.shape[1] = 1,
                 "cu_seqlens_k:", "sequence lengths <= max_blocks_per_seq * page_size = 2", "length 4 for sequence 0")
PAGED_ERROR_TEST(SequsedBeyondSpan, 0, true, f.in.seqused_k.i32()[1] = 9,
                 "seqused_k[1]:", "a key count in [0, cu_seqlens_k[2] - cu_seqlens_k[1] = 5]", "got 9")
PAGED_ERROR_TEST(SequsedBeyondPages, 2, true, f.in.seqused_k.i32()[0] = 7,
                 "seqused_k[0]:", "a key count in [0, min(max_blocks_per_seq * page_size = 8, max_seqlen_k = 5)]",
                 "got 7")
PAGED_ERROR_TEST(NegativeSeqused, 0, true, f.in.seqused_k.i32()[0] = -1, "seqused_k[0]:", "got -1")
PAGED_ERROR_TEST(SequsedShape, 0, true, p.seqused_k.shape[0] = 3, "seqused_k:", "shape [2] (batch)", "got shape [3]")
PAGED_ERROR_TEST(SequsedDtype, 0, true, p.seqused_k.dtype = DType::f32, "seqused_k:", "dtype i32", "got f32")

#define BWD_ERROR_TEST(test_name, mutate, ...)                                              \
  TEST(BackwardErrors, test_name) {                                                         \
    FwdFixture f;                                                                           \
    auto& p = f.p;                                                                          \
    mutate;                                                                                 \
    expect_error([&] { flashattn::backward(p); }, Status::invalid_argument, {__VA_ARGS__}); \
    EXPECT_TRUE(f.outputs_untouched());                                                     \
  }

BWD_ERROR_TEST(PagedKeys, p.block_table = f.in.q.view(),
               "backward: block_table:", "none (backward does not support paged K/V, as flash-attn's)", "got a tensor")
BWD_ERROR_TEST(Seqused, p.seqused_k = f.in.q.view(), "backward: seqused_k:", "none", "got a tensor")
BWD_ERROR_TEST(MissingLse, p.softmax_lse = Tensor(), "backward: softmax_lse:", "the fp32 log-sum-exp saved by forward",
               "got none")
BWD_ERROR_TEST(MissingDout, p.dout = Tensor(), "dout:", "got none")
BWD_ERROR_TEST(DkShape, p.dk.shape[2] = 4, "dk:", "shape [2, 7, 2, 16] (same as k)", "got shape [2, 7, 4, 16]")
BWD_ERROR_TEST(DvDtype, p.dv.dtype = DType::bf16, "dv:", "dtype f16 (same as v)", "got bf16")
BWD_ERROR_TEST(DqShape, p.dq.shape[0] = 1, "dq:", "(same as q)", "got shape [1, 5, 4, 16]")

// A valid KV-cache call: paged or contiguous cache, with an append.
struct KVFixture {
  KVInputs in;
  HostTensor out, lse;
  flashattn::KVCacheParams p;

  explicit KVFixture(bool paged) {
    KVConfig c;
    c.batch = 2, c.heads = 4, c.heads_k = 2, c.head_dim = 16, c.capacity = 32, c.seqlen_q = 1, c.seqlen_new = 1;
    c.page_size = paged ? 4 : 0;
    c.cache_seqlens = {3, 10};
    c.rotary_dim = 8;
    in = make_kv_inputs(c, 3);
    out = HostTensor(c.dtype, in.q.shape());
    lse = HostTensor(DType::f32, {2, 4, 1});
    out.poison();
    lse.poison();
    p.q = in.q.view();
    p.k_cache = in.k_cache.view();
    p.v_cache = in.v_cache.view();
    p.k_new = in.k_new.view();
    p.v_new = in.v_new.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.cache_seqlens = in.cache_seqlens.view();
    p.block_table = in.block_table.view();
    p.rotary_cos = in.rotary_cos.view();
    p.rotary_sin = in.rotary_sin.view();
  }
  bool untouched(const KVInputs& original) const {
    for (int64_t i = 0; i < out.numel(); ++i)
      if (!std::isnan(out.get(i))) return false;
    for (int64_t i = 0; i < in.k_cache.numel(); ++i)
      if (in.k_cache.get(i) != original.k_cache.get(i) || in.v_cache.get(i) != original.v_cache.get(i)) return false;
    return true;
  }
};

#define KV_ERROR_TEST(test_name, paged, mutate, ...)                                               \
  TEST(KVCacheErrors, test_name) {                                                                 \
    KVFixture f(paged);                                                                            \
    const KVInputs original = f.in;                                                                \
    auto& p = f.p;                                                                                 \
    mutate;                                                                                        \
    expect_error([&] { flashattn::forward_kvcache(p); }, Status::invalid_argument, {__VA_ARGS__}); \
    EXPECT_TRUE(f.untouched(original));                                                            \
  }

KV_ERROR_TEST(OnlyKNew, false, p.v_new = Tensor(), "forward_kvcache: v_new:", "both k_new and v_new, or neither",
              "only one of them")
KV_ERROR_TEST(SeqlenBeyondCapacity, false, f.in.cache_seqlens.i32()[1] = 32, "cache_seqlens[1]:", "a length in [0, 31]",
              "got 32")
KV_ERROR_TEST(MoreNewTokensThanTheCacheHolds, false, (p.k_new.shape[1] = 40, p.v_new.shape[1] = 40),
              "k_new:", "at most 32 new tokens (dim 1; the cache capacity)", "got 40 tokens")
KV_ERROR_TEST(NegativeSeqlen, false, f.in.cache_seqlens.i32()[0] = -1, "cache_seqlens[0]:", "got -1")
KV_ERROR_TEST(BlockOutOfRange, true, f.in.block_table.i32()[0] = 1000, "block_table[0][0]:", "a block index in [0, 19)",
              "got 1000")
KV_ERROR_TEST(BlockTableBatch, true, p.block_table.shape[0] = 1, "block_table:", "shape [2, max_blocks_per_seq]",
              "got shape [1, 8]")
KV_ERROR_TEST(BatchIdxWithPages, true, p.cache_batch_idx = f.in.cache_seqlens.view(),
              "cache_batch_idx:", "none with a paged cache")
KV_ERROR_TEST(BatchIdxOutOfRange, false,
              (f.in.cache_seqlens.i32()[0] = 7, p.cache_batch_idx = f.in.cache_seqlens.view()),
              "cache_batch_idx[0]:", "an index in [0, 2)", "got 7")
KV_ERROR_TEST(RotaryTooWide, false,
              (p.rotary_cos.shape[1] = 9, p.rotary_sin.shape[1] = 9, p.rotary_cos.stride[0] = 9,
               p.rotary_sin.stride[0] = 9),
              "rotary_cos:", "rotary_dim / 2 in [1, head_dim / 2 = 8]", "got 9")
KV_ERROR_TEST(RotaryTooShort, false, (p.rotary_cos.shape[0] = 16, p.rotary_sin.shape[0] = 16),
              "rotary_cos:", "at least 32 rows", "got 16 rows")
KV_ERROR_TEST(OnlyRotaryCos, false, p.rotary_sin = Tensor(), "rotary_sin:", "both rotary_cos and rotary_sin",
              "only one of them")
KV_ERROR_TEST(NegativeSplits, false, p.num_splits = -1, "num_splits:", "a value >= 0", "got -1")
KV_ERROR_TEST(CacheHeadDim, false, p.v_cache.shape[3] = 8, "v_cache:", "shape [2, 32, 2, 16]",
              "got shape [2, 32, 2, 8]")
KV_ERROR_TEST(TooFewCacheRows, false, (p.k_cache.shape[0] = 1, p.v_cache.shape[0] = 1),
              "k_cache:", "at least 2 cache rows (batch of q)", "got shape [1, 32, 2, 16]")

TEST(KVCacheErrors, LeftpadGreaterThanSeqlen) {
  KVFixture f(false);
  const KVInputs original = f.in;
  HostTensor pad = i32_tensor({4, 0});  // sequence 0 holds only 3 tokens
  f.p.cache_leftpad = pad.view();
  expect_error([&] { flashattn::forward_kvcache(f.p); }, Status::invalid_argument,
               {"cache_leftpad[0]:", "a value in [0, cache_seqlens[0] = 3]", "got 4"});
  EXPECT_TRUE(f.untouched(original));
}

TEST(BackendErrors, ForcedBackendOnWrongDevice) {
  FwdFixture f;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) {
    if (b.device != flashattn::DeviceType::cuda) continue;
    f.p.options.backend = b.name;
    expect_error(
        [&] { flashattn::forward(f.p); }, Status::unsupported,
        {"backend '" + b.name + "' does not support this call", "runs on cuda tensors, the call's are on cpu"});
    return;
  }
  GTEST_SKIP() << "no CUDA backend compiled in: nothing to force onto CPU tensors";
}

}  // namespace
}  // namespace fa_test
