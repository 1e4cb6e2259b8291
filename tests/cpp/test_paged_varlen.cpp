// Paged K/V and seqused_k in the varlen forward. The shared catalogue (case_catalog.cpp) runs every
// backend's paged calls against the fp64 oracle on contiguous keys; here: the reference's own paged path
// reads exactly the keys of its contiguous path, and which backends take or decline such calls.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "api/backend.h"
#include "api/validate.h"
#include "attention_case.h"
#include "case_catalog.h"
#include "common/score.h"
#include "cuda/attn/paged_keys.h"

namespace fa_test {
namespace {

using namespace flashattn::detail;

std::vector<AttnConfig> paged_cases() {
  std::vector<AttnConfig> out;
  for (const AttnConfig& c : forward_cases())
    if (c.paged_or_seqused()) out.push_back(c);
  return out;
}

TEST(PagedVarlen, CatalogueHasChunkedPrefill) {
  // A batch mixing single-token decode steps and 2k-token prefills, paged with seqused_k, in one call, at
  // page sizes 16 and 256.
  std::set<int64_t> pages;
  for (const AttnConfig& c : paged_cases()) {
    const auto [lo, hi] = std::minmax_element(c.varlen_q.begin(), c.varlen_q.end());
    if (c.page_size > 0 && c.seqused_k && *lo == 1 && *hi >= 2048) pages.insert(c.page_size);
  }
  EXPECT_EQ(pages, (std::set<int64_t>{16, 256}));
}

// The oracle of the catalogue is cpu_reference on contiguous keys; its paged path must give the same bits.
TEST(PagedVarlen, ReferenceReadsTheSameKeysPagedAndContiguous) {
  const std::vector<AttnConfig> cases = paged_cases();
  ASSERT_GE(cases.size(), 10u);
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].varlen_q.size() == 5 && cases[i].varlen_q[1] == 2048) continue;  // the long one: catalogue only
    SCOPED_TRACE(cases[i].name());
    const AttnInputs in = make_inputs(cases[i], 60 + i);
    const FwdOutputs paged = run_forward(in, "cpu_reference", flashattn::Device::cpu());
    const FwdOutputs contiguous = run_forward(contiguous_keys(in), "cpu_reference", flashattn::Device::cpu());
    EXPECT_TRUE(bitwise_equal(paged.out, contiguous.out));
    EXPECT_TRUE(bitwise_equal(paged.lse, contiguous.lse));
  }
}

// The sm80 forward's paged addressing (cuda/attn/paged_keys.h: a multiply-shift division, a 32-bit
// clamped entry) is key_offset's rule, the CPU backends', for every key a table row addresses, bad
// entries (negative, past the pool, INT_MAX) included: they clamp to the same page.
TEST(PagedVarlen, KernelAddressingMatchesKeyOffset) {
  namespace attn = flashattn::detail::cuda::attn;
  std::mt19937 rng(7);
  for (int64_t page : {1, 3, 16, 48, 64, 256, 1000}) {
    SCOPED_TRACE(page);
    FwdProblem p;
    p.heads_k = 3;
    p.head_dim = 40;
    p.paged.page_size = page;
    p.paged.num_blocks = 29;
    const int64_t batch = 3, max_blocks = 6;
    p.paged.block_table_stride = max_blocks + 1;
    p.paged.capacity = max_blocks * page;
    std::vector<int32_t> table(size_t(batch * p.paged.block_table_stride));
    std::uniform_int_distribution<int32_t> entry(-3, int32_t(p.paged.num_blocks) + 3);
    for (int32_t& e : table) e = entry(rng);
    table[1] = INT32_MAX;
    table[size_t(p.paged.block_table_stride) + 2] = INT32_MIN;
    p.paged.block_table = table.data();
    p.k.head_stride = p.head_dim + 8;
    p.k.row_stride = p.heads_k * p.k.head_stride;
    p.k.batch_stride = page * p.k.row_stride + 24;
    const attn::FastDivmod div = attn::make_fast_divmod(uint32_t(page));
    for (int64_t b = 0; b < batch; ++b) {
      const attn::PagedKeyRows rows = attn::paged_key_rows(p.paged, div, b);
      for (int64_t key = 0; key < p.paged.capacity; ++key)
        for (int64_t h = 0; h < p.heads_k; ++h)
          ASSERT_EQ(rows.row_offset(int(key), p.k.batch_stride, p.k.row_stride) + h * p.k.head_stride,
                    key_offset(p, p.k, SeqRange{}, b, key, h))
              << "b " << b << " key " << key;
    }
  }
}

// A backend whose table does not declare paged_varlen_fwd declines with a reason (query_backends shows
// it); cuda_sm80, cuda_sm90 and cuda_sm70 read block tables in their forwards, the other CUDA backends decline.
TEST(PagedVarlen, BackendsWithoutTheFeatureDecline) {
  AttnConfig c;
  c.varlen_q = {3, 1};
  c.varlen_k = {9, 4};
  c.head_dim = 16;
  for (auto [page, seqused] : {std::pair{int64_t(4), false}, std::pair{int64_t(0), true}}) {
    c.page_size = page;
    c.seqused_k = seqused;
    const AttnInputs in = make_inputs(c, 5);
    FwdProblem pr;
    run_forward_via(in, "", flashattn::Device::cpu(), [&](const flashattn::FwdParams& p) { pr = make_fwd_problem(p); });
    const std::string why = capability_reason(Backend{}, pr);
    EXPECT_NE(why.find(page ? "block_table" : "seqused_k"), std::string::npos) << why;
    for (const Backend& b : registry())
      EXPECT_EQ(capability_reason(b, pr).empty(),
                b.device == flashattn::DeviceType::cpu || std::string(b.name) == "cuda_sm80" ||
                    std::string(b.name) == "cuda_sm90" || std::string(b.name) == "cuda_sm70" ||
                    std::string(b.name) == "cuda_fp8")
          << b.name;
  }
}

}  // namespace
}  // namespace fa_test
