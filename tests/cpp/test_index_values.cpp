// A catalogue of bad index values (past the cache's capacity, INT_MAX, negative, past the page pool,
// cu_seqlens not monotone or past the packed total) for every entry point that reads index tensors:
// forward and backward (varlen), the paged varlen forward (block_table, seqused_k) and forward_kvcache
// (contiguous and paged). The contract of docs/reliability.md, per device:
//   CPU: a named error (the argument, with the batch index for per-sequence tensors), checked on the host;
//   CUDA: no error by default, nothing read or written outside the call's tensors (the context survives
//     and the next correct call still matches the reference); with FLASHATTN_CHECK_INDEX_VALUES=1 the
//     same named error as on the CPU, found by a kernel on the device.
// The GPU cases skip without a device; scripts/gpu-check.sh --tests '*IndexValues*' runs them (and
// compute-sanitizer with --sanitizer-tests '*IndexValues*').

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "api/index_check.h"
#include "api/validate.h"
#include "attention_case.h"
#include "common/index_faults.h"
#include "criterion.h"
#include "gpu_test.h"
#include "kvcache_case.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {
namespace {

namespace detail = flashattn::detail;
using flashattn::Status;

// Sets FLASHATTN_CHECK_INDEX_VALUES for the scope (read by every call), then unsets it.
struct CheckModeScope {
  explicit CheckModeScope(bool on) {
    if (on) setenv("FLASHATTN_CHECK_INDEX_VALUES", "1", 1);
  }
  ~CheckModeScope() { unsetenv("FLASHATTN_CHECK_INDEX_VALUES"); }
};

// The error a call must raise: invalid_argument whose message holds every fragment.
void expect_named_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected an error naming '" << fragments[0] << "'";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message: " << e.what() << "\nmissing: " << f;
  }
}

// ---- varlen forward / backward ----

AttnConfig varlen_config() {
  AttnConfig c;
  c.dtype = DType::f16;
  c.heads = 4, c.heads_k = 2, c.head_dim = 64;
  c.varlen_q = {5, 17, 9};
  c.varlen_k = {12, 3, 20};
  c.causal = true;
  return c;
}

struct VarlenBad {
  const char* name;
  bool on_k;      // cu_seqlens_k, else cu_seqlens_q
  int index;      // the offset changed
  int64_t value;  // its new value; kPastTotal: the packed total + 5
};
constexpr int64_t kPastTotal = -1000;

const std::vector<VarlenBad>& varlen_catalogue() {
  static const std::vector<VarlenBad> c = {
      {"q_past_total", false, 3, kPastTotal}, {"q_int_max", false, 2, INT_MAX},  {"q_negative", false, 1, -7},
      {"q_not_monotone", false, 2, 1},        {"q_first_not_zero", false, 0, 2}, {"k_past_total", true, 3, kPastTotal},
      {"k_int_max", true, 1, INT_MAX},        {"k_negative", true, 2, INT_MIN},  {"k_not_monotone", true, 2, 4},
  };
  return c;
}

AttnInputs with_bad_offsets(const AttnInputs& good, const VarlenBad& bad) {
  AttnInputs in = good;
  HostTensor& cu = bad.on_k ? in.cu_seqlens_k : in.cu_seqlens_q;
  const int64_t total = bad.on_k ? in.k.shape()[0] : in.q.shape()[0];
  cu.i32()[bad.index] = int32_t(bad.value == kPastTotal ? total + 5 : bad.value);
  return in;
}

class IndexValuesVarlen : public testing::TestWithParam<int> {};

TEST_P(IndexValuesVarlen, CpuNamesTheArgument) {
  const VarlenBad& bad = varlen_catalogue()[size_t(GetParam())];
  const AttnInputs good = make_inputs(varlen_config(), 77);
  const AttnInputs in = with_bad_offsets(good, bad);
  const std::string arg = bad.on_k ? "cu_seqlens_k:" : "cu_seqlens_q:";
  for (const std::string backend : {"cpu_flash", "cpu_reference"}) {
    expect_named_error([&] { run_forward(in, backend, flashattn::Device::cpu()); }, {"flashattn::forward:", arg});
    const FwdOutputs fwd = run_forward(good, backend, flashattn::Device::cpu());
    expect_named_error([&] { run_backward(in, fwd, backend, flashattn::Device::cpu()); },
                       {"flashattn::backward:", arg});
  }
}

// The device check's rules and messages (common/index_faults.h, api/index_check.cpp) run on the host:
// a problem validated with good offsets, whose offsets then turn bad, gives the named error of the CPU.
TEST_P(IndexValuesVarlen, DeviceCheckRulesNameTheArgument) {
  const VarlenBad& bad = varlen_catalogue()[size_t(GetParam())];
  const AttnInputs good = make_inputs(varlen_config(), 79);
  AttnInputs in = good;
  HostTensor out(in.q.dtype(), in.q.shape());
  flashattn::FwdParams p;
  fill_call_options(p, in);
  p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.out = out.view();
  p.cu_seqlens_q = in.cu_seqlens_q.view(), p.cu_seqlens_k = in.cu_seqlens_k.view();
  const detail::FwdProblem pr = detail::make_fwd_problem(p);
  const AttnInputs bad_in = with_bad_offsets(good, bad);
  in.cu_seqlens_q = bad_in.cu_seqlens_q;  // same sizes: the problem's pointers stay valid
  in.cu_seqlens_k = bad_in.cu_seqlens_k;
  detail::FwdProblem now = pr;
  now.cu_seqlens_q = in.cu_seqlens_q.i32();
  now.cu_seqlens_k = in.cu_seqlens_k.i32();
  detail::IndexFault first;
  for (int64_t i = 0; i <= now.batch; ++i)
    for (bool k : {false, true}) {
      const detail::IndexFault f =
          detail::cu_seqlens_fault(k ? now.cu_seqlens_k : now.cu_seqlens_q, i, now.batch, k ? now.total_k : now.total_q,
                                   k ? now.seqlen_k : now.seqlen_q, k);
      if (f.before(first)) first = f;
    }
  ASSERT_TRUE(first.found());
  expect_named_error([&] { detail::raise_index_fault("flashattn::forward", first, flashattn::Device::cuda(0)); },
                     {"flashattn::forward:", bad.on_k ? "cu_seqlens_k:" : "cu_seqlens_q:", "(checked on cuda:0)"});
}

// Each bad call on every CUDA backend, then a correct call that must match the reference: the bad one
// neither faulted (the context would be lost) nor wrote outside its tensors. With the check mode on, the
// bad call raises the CPU's named error instead.
TEST_P(IndexValuesVarlen, CudaStaysInBoundsAndChecksOnRequest) {
  FA_SKIP_WITHOUT_GPU("bad cu_seqlens on the CUDA backends");
  const VarlenBad& bad = varlen_catalogue()[size_t(GetParam())];
  const AttnInputs good = make_inputs(varlen_config(), 78);
  const AttnInputs in = with_bad_offsets(good, bad);
  const FwdOutputs ref = reference_forward(good);
  const BwdOutputs ref_bwd = reference_backward(good);
  const NaiveOutputs naive = naive_lowp(good, true);
  const std::string arg = bad.on_k ? "cu_seqlens_k:" : "cu_seqlens_q:";
  for (const std::string& backend : runnable_backends(flashattn::DeviceType::cuda)) {
    SCOPED_TRACE(backend);
    const flashattn::Device dev = device_of(backend);
    FwdOutputs fwd;
    try {
      fwd = run_forward(good, backend, dev);
    } catch (const flashattn::Error& e) {
      if (e.status() == Status::unsupported) continue;  // a backend without varlen
      throw;
    }
    EXPECT_NO_THROW(run_forward(in, backend, dev));
    bool backward = true;
    try {
      run_backward(in, fwd, backend, dev);
    } catch (const flashattn::Error& e) {
      backward = false;
      if (e.status() != Status::unsupported) ADD_FAILURE() << "the bad backward raised: " << e.what();
    }
    device_synchronize(dev);
    expect_forward_within_criterion(run_forward(good, backend, dev), ref, naive, good.cfg.dtype);
    if (backward)
      expect_backward_within_criterion(run_backward(good, fwd, backend, dev), ref_bwd, naive, good.cfg.dtype);
    CheckModeScope check(true);
    expect_named_error([&] { run_forward(in, backend, dev); }, {"flashattn::forward:", arg, "checked on cuda:0"});
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, IndexValuesVarlen, testing::Range(0, int(varlen_catalogue().size())),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(varlen_catalogue()[size_t(info.param)].name);
                         });

// ---- forward_kvcache ----

enum class KvTensor { seqlens, block_table, batch_idx, leftpad };

struct KvBad {
  const char* name;
  bool paged;
  KvTensor tensor;
  int64_t b, column;  // the sequence; block_table: the column
  int64_t value;      // kPastPool: the pool's size; kPastCapacity: the capacity - seqlen_new + 1
  const char* arg;    // the argument the error names
};
constexpr int64_t kPastPool = -2000, kPastCapacity = -3000;

const std::vector<KvBad>& kv_catalogue() {
  static const std::vector<KvBad> c = {
      {"seqlen_past_capacity", false, KvTensor::seqlens, 1, 0, kPastCapacity, "cache_seqlens[1]:"},
      {"seqlen_int_max", false, KvTensor::seqlens, 1, 0, INT_MAX, "cache_seqlens[1]:"},
      {"seqlen_negative", false, KvTensor::seqlens, 2, 0, -3, "cache_seqlens[2]:"},
      {"paged_seqlen_past_table", true, KvTensor::seqlens, 1, 0, kPastCapacity, "block_table[1]:"},
      {"paged_seqlen_int_max", true, KvTensor::seqlens, 0, 0, INT_MAX, "block_table[0]:"},
      {"paged_seqlen_negative", true, KvTensor::seqlens, 1, 0, INT_MIN, "cache_seqlens[1]:"},
      {"page_past_pool", true, KvTensor::block_table, 1, 0, kPastPool, "block_table[1][0]:"},
      {"page_int_max", true, KvTensor::block_table, 1, 2, INT_MAX, "block_table[1][2]:"},
      {"page_negative", true, KvTensor::block_table, 2, 1, -1, "block_table[2][1]:"},
      {"batch_idx_past_cache", false, KvTensor::batch_idx, 2, 0, 5, "cache_batch_idx[2]:"},
      {"batch_idx_int_max", false, KvTensor::batch_idx, 0, 0, INT_MAX, "cache_batch_idx[0]:"},
      {"batch_idx_negative", false, KvTensor::batch_idx, 1, 0, -1, "cache_batch_idx[1]:"},
      {"leftpad_past_seqlen", false, KvTensor::leftpad, 1, 0, INT_MAX, "cache_leftpad[1]:"},
      {"leftpad_negative", true, KvTensor::leftpad, 0, 0, -4, "cache_leftpad[0]:"},
  };
  return c;
}

KVConfig kv_config(bool paged) {
  KVConfig c;
  c.dtype = DType::f16;
  c.batch = 3, c.seqlen_q = 2, c.heads = 4, c.heads_k = 2, c.head_dim = 64;
  c.capacity = 64;
  c.page_size = paged ? 16 : 0;
  c.cache_seqlens = {5, 40, 17};
  c.seqlen_new = 2;
  c.batch_idx = !paged;
  c.leftpad = true;
  c.causal = true;
  return c;
}

void apply_bad_value(KVInputs& in, const KvBad& bad) {
  const KVConfig& c = in.cfg;
  int64_t v = bad.value;
  if (v == kPastPool) v = in.k_cache.shape()[0];
  if (v == kPastCapacity) v = c.capacity - c.seqlen_new + 1;
  switch (bad.tensor) {
    case KvTensor::seqlens:
      in.cache_seqlens.i32()[bad.b] = int32_t(v);
      break;
    case KvTensor::block_table:
      in.block_table.i32()[bad.b * in.block_table.shape()[1] + bad.column] = int32_t(v);
      in.cache_leftpad.i32()[bad.b] = 0;  // every column up to the sequence's end is in use
      break;
    case KvTensor::batch_idx:
      in.cache_batch_idx.i32()[bad.b] = int32_t(v);
      break;
    case KvTensor::leftpad:
      in.cache_leftpad.i32()[bad.b] = int32_t(v);
      break;
  }
}

KVInputs with_bad_value(const KVInputs& good, const KvBad& bad) {
  KVInputs in = good;
  apply_bad_value(in, bad);
  return in;
}

std::string bad_value_text(const KVInputs& good, const KvBad& bad) {
  int64_t v = bad.value;
  if (v == kPastPool) v = good.k_cache.shape()[0];
  if (v == kPastCapacity) v = good.cfg.capacity - good.cfg.seqlen_new + 1;
  return std::to_string(v);
}

// The params of a KV-cache call on `in` writing `out`, each tensor given as view(host tensor).
template <typename View>
flashattn::KVCacheParams kv_params(const KVInputs& in, const HostTensor& out, View view) {
  flashattn::KVCacheParams p;
  p.q = view(in.q), p.k_cache = view(in.k_cache), p.v_cache = view(in.v_cache);
  p.k_new = view(in.k_new), p.v_new = view(in.v_new), p.out = view(out);
  p.cache_seqlens = view(in.cache_seqlens), p.cache_batch_idx = view(in.cache_batch_idx);
  p.cache_leftpad = view(in.cache_leftpad), p.block_table = view(in.block_table);
  p.options.causal = in.cfg.causal;
  return p;
}

class IndexValuesKVCache : public testing::TestWithParam<int> {};

TEST_P(IndexValuesKVCache, CpuNamesTheArgumentAndTheValue) {
  const KvBad& bad = kv_catalogue()[size_t(GetParam())];
  const KVInputs good = make_kv_inputs(kv_config(bad.paged), 91);
  const KVInputs in = with_bad_value(good, bad);
  for (const std::string backend : {"cpu_flash", "cpu_reference"})
    expect_named_error([&] { run_kvcache(in, backend, flashattn::Device::cpu()); },
                       {"flashattn::forward_kvcache:", bad.arg, bad_value_text(good, bad)});
}

// The device check's rules over the catalogue, on the host: the argument and value of the CPU's error.
TEST_P(IndexValuesKVCache, DeviceCheckRulesNameTheArgumentAndTheValue) {
  const KvBad& bad = kv_catalogue()[size_t(GetParam())];
  const KVInputs good = make_kv_inputs(kv_config(bad.paged), 94);
  KVInputs in = good;
  HostTensor out(in.cfg.dtype, in.q.shape());
  const flashattn::KVCacheParams p = kv_params(in, out, [](const HostTensor& t) { return t.view(); });
  const detail::KVCacheProblem pr = detail::make_kvcache_problem(p);
  apply_bad_value(in, bad);  // in place: the problem reads the bad values now
  detail::IndexFault first;
  for (int64_t b = 0; b < pr.batch; ++b) {
    if (const detail::IndexFault f = detail::kv_sequence_fault(pr, b); f.before(first)) first = f;
    const detail::PageColumns cols = detail::kv_page_columns(pr, b);
    for (int64_t i = cols.first; i < cols.end; ++i)
      if (const detail::IndexFault f = detail::kv_page_fault(pr, b, i); f.before(first)) first = f;
  }
  ASSERT_TRUE(first.found());
  expect_named_error(
      [&] { detail::raise_index_fault("flashattn::forward_kvcache", first, flashattn::Device::cuda(0)); },
      {"flashattn::forward_kvcache:", bad.arg, bad_value_text(good, bad), "(checked on cuda:0)"});
}

// CPU calls are checked on the host whatever the check mode: with it on, correct calls still run.
TEST(IndexValues, CheckModeLeavesCpuCallsAlone) {
  CheckModeScope check(true);
  const KVInputs in = make_kv_inputs(kv_config(true), 95);
  EXPECT_NO_THROW(run_kvcache(in, "cpu_flash", flashattn::Device::cpu()));
}

testing::AssertionResult caches_equal(const char* what, const HostTensor& got, const HostTensor& ref) {
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (got.get(i) != ref.get(i)) return testing::AssertionFailure() << what << "[" << i << "] differs";
  return testing::AssertionSuccess();
}

TEST_P(IndexValuesKVCache, CudaStaysInBoundsAndChecksOnRequest) {
  FA_SKIP_WITHOUT_GPU("bad index values on the CUDA decode backend");
  const KvBad& bad = kv_catalogue()[size_t(GetParam())];
  const KVInputs good = make_kv_inputs(kv_config(bad.paged), 92);
  const KVInputs in = with_bad_value(good, bad);
  const KVOracle oracle = kv_oracle(good);
  for (const std::string& backend : runnable_backends(flashattn::DeviceType::cuda)) {
    SCOPED_TRACE(backend);
    const flashattn::Device dev = device_of(backend);
    try {
      run_kvcache(in, backend, dev);
    } catch (const flashattn::Error& e) {
      if (e.status() == Status::unsupported) continue;  // a backend without forward_kvcache
      ADD_FAILURE() << "the bad call raised without the check mode: " << e.what();
    }
    device_synchronize(dev);
    const KVOutputs got = run_kvcache(good, backend, dev);
    EXPECT_TRUE(within_criterion("out", got.out, oracle.out, oracle.naive_out, good.cfg.dtype));
    EXPECT_TRUE(within_criterion("softmax_lse", got.lse, oracle.lse, oracle.naive_lse, DType::f32));
    EXPECT_TRUE(caches_equal("v_cache", got.v_cache, oracle.appended.v_cache));
    CheckModeScope check(true);
    expect_named_error([&] { run_kvcache(in, backend, dev); },
                       {"flashattn::forward_kvcache:", bad.arg, bad_value_text(good, bad), "checked on cuda:0"});
    EXPECT_NO_THROW(run_kvcache(good, backend, dev)) << "the check mode must accept a correct call";
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, IndexValuesKVCache, testing::Range(0, int(kv_catalogue().size())),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(kv_catalogue()[size_t(info.param)].name);
                         });

// ---- paged varlen forward (block_table, seqused_k) ----

struct PagedBad {
  const char* name;
  bool on_table;      // block_table, else seqused_k
  int64_t b, column;  // the sequence; block_table: the column (one the sequence uses)
  int64_t value;      // kPastPool: the pool's size
  const char* arg;    // the argument the CPU's error names
};

const std::vector<PagedBad>& paged_catalogue() {
  static const std::vector<PagedBad> c = {
      {"page_past_pool", true, 1, 0, kPastPool, "block_table[1][0]:"},
      {"page_int_max", true, 2, 1, INT_MAX, "block_table[2][1]:"},
      {"page_negative", true, 0, 0, INT_MIN, "block_table[0][0]:"},
      {"seqused_int_max", false, 1, 0, INT_MAX, "seqused_k[1]:"},
      {"seqused_negative", false, 2, 0, -5, "seqused_k[2]:"},
  };
  return c;
}

// varlen_config's sequences (12, 3 and 20 used keys: sequence 2 uses two pages) in pages of 16 keys.
AttnConfig paged_varlen_config() {
  AttnConfig c = varlen_config();
  c.page_size = 16;
  c.seqused_k = true;
  return c;
}

AttnInputs with_bad_entry(const AttnInputs& good, const PagedBad& bad) {
  AttnInputs in = good;
  const int64_t v = bad.value == kPastPool ? in.call_k.shape()[0] : bad.value;
  if (bad.on_table)
    in.block_table.i32()[bad.b * in.block_table.shape()[1] + bad.column] = int32_t(v);
  else
    in.seqused_k.i32()[bad.b] = int32_t(v);
  return in;
}

class IndexValuesPagedVarlen : public testing::TestWithParam<int> {};

TEST_P(IndexValuesPagedVarlen, CpuNamesTheArgument) {
  const PagedBad& bad = paged_catalogue()[size_t(GetParam())];
  const AttnInputs in = with_bad_entry(make_inputs(paged_varlen_config(), 83), bad);
  for (const std::string backend : {"cpu_flash", "cpu_reference"})
    expect_named_error([&] { run_forward(in, backend, flashattn::Device::cpu()); }, {"flashattn::forward:", bad.arg});
}

// The device check's rule for cu_seqlens_k of a paged call (src/cuda/common/index_check.cu passes total -1):
// the offsets address no rows, so their last one need not equal any total; the other rules still hold.
TEST(IndexValues, DeviceCheckRulesSkipThePackedTotalOfPagedKeys) {
  const std::vector<int32_t> cu = {0, 5, 9};
  EXPECT_FALSE(detail::cu_seqlens_fault(cu.data(), 2, 2, -1, 8, true).found());
  EXPECT_TRUE(detail::cu_seqlens_fault(cu.data(), 2, 2, 100, 8, true).found());
  const std::vector<int32_t> long_one = {0, 5, 19};
  EXPECT_TRUE(detail::cu_seqlens_fault(long_one.data(), 2, 2, -1, 8, true).found());
}

// Each bad call on every CUDA backend that takes paged varlen calls (cuda_sm80), then a correct call that
// must match the reference: the kernel clamped the entry or the count (attn/paged_keys.h, seq_range) and
// read inside the cache. The device check mode (FLASHATTN_CHECK_INDEX_VALUES) reads cu_seqlens only (not
// yet block_table or seqused_k): it must accept the correct call, whose cu_seqlens_k address no rows.
TEST_P(IndexValuesPagedVarlen, CudaStaysInBounds) {
  FA_SKIP_WITHOUT_GPU("bad block_table / seqused_k on the CUDA backends");
  const PagedBad& bad = paged_catalogue()[size_t(GetParam())];
  const AttnInputs good = make_inputs(paged_varlen_config(), 84);
  const AttnInputs in = with_bad_entry(good, bad);
  const FwdOutputs ref = reference_forward(good);
  const NaiveOutputs naive = naive_lowp(good, false);
  int ran = 0;
  for (const std::string& backend : runnable_backends(flashattn::DeviceType::cuda)) {
    SCOPED_TRACE(backend);
    const flashattn::Device dev = device_of(backend);
    try {
      run_forward(good, backend, dev);
    } catch (const flashattn::Error& e) {
      if (e.status() == Status::unsupported) continue;  // a backend without paged varlen
      throw;
    }
    EXPECT_NO_THROW(run_forward(in, backend, dev));
    device_synchronize(dev);
    expect_forward_within_criterion(run_forward(good, backend, dev), ref, naive, good.cfg.dtype);
    CheckModeScope check(true);
    EXPECT_NO_THROW(run_forward(good, backend, dev)) << "the check mode must accept a correct call";
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no CUDA backend ran the paged varlen call";
}

INSTANTIATE_TEST_SUITE_P(Catalogue, IndexValuesPagedVarlen, testing::Range(0, int(paged_catalogue().size())),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(paged_catalogue()[size_t(info.param)].name);
                         });

// flash-attn's test_flash_attn_kvcache_paged_block_table_bounds, in our terms: a block table one page
// too short for cache_seqlens + the new keys is named as block_table on the CPU.
TEST(IndexValues, BlockTableTooShortForTheNewKeysIsNamed) {
  const KVInputs in = make_kv_inputs(kv_config(true), 93);
  KVInputs bad = in;
  bad.cache_seqlens.i32()[1] = 63;  // 63 + 2 new keys need 5 pages of 16; the table has 4
  expect_named_error([&] { run_kvcache(bad, "cpu_flash", flashattn::Device::cpu()); },
                     {"block_table[1]:", "enough pages for cache_seqlens[1] + seqlen_new = 63 + 2 positions",
                      "got 4 pages of 16 (64 positions)"});
}

// The check mode synchronises, so it is refused while the call's stream is being captured.
TEST(IndexValues, CheckModeIsRefusedDuringGraphCapture) {
  FA_SKIP_WITHOUT_GPU("the check mode under CUDA graph capture");
#if defined(FLASHATTN_WITH_CUDA)
  const flashattn::Device dev = flashattn::Device::cuda(0);
  const KVInputs in = make_kv_inputs(kv_config(true), 96);
  HostTensor out(in.cfg.dtype, in.q.shape());
  std::deque<DeviceTensor> uploaded;
  flashattn::KVCacheParams p = kv_params(in, out, [&](const HostTensor& t) {
    if (!t.present()) return Tensor();
    return uploaded.emplace_back(t, dev).view();
  });
  p.options.check_index_values = true;
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  expect_named_error([&] { flashattn::forward_kvcache(p, stream); },
                     {"check_index_values (or FLASHATTN_CHECK_INDEX_VALUES):", "off during CUDA graph capture"});
  cudaGraph_t graph = nullptr;
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  if (graph) cudaGraphDestroy(graph);
  EXPECT_NO_THROW(flashattn::forward_kvcache(p, stream)) << "outside capture the check runs and passes";
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
#endif
}

}  // namespace
}  // namespace fa_test
