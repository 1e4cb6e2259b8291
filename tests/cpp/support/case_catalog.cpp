#include "case_catalog.h"

#include <utility>

namespace fa_test {

namespace {

const int64_t kHeadDims[] = {8, 32, 40, 64, 80, 96, 128, 160, 192, 256};
const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
// Head dims that are not multiples of 8 (flash-attn pads them; CUDA backends here run them padded inside
// the library, the CPU backends natively): the smallest, a few odd ones below and above a vector of 16
// lanes, the two flash-attn's own tests use (59, 111) and the largest.
const int64_t kOddHeadDims[] = {1, 2, 5, 13, 59, 111, 203, 255};

AttnConfig base(DType dt, int64_t d) {
  AttnConfig c;
  c.dtype = dt;
  c.head_dim = d;
  c.batch = 2;
  c.seqlen_q = 37;
  c.seqlen_k = 53;
  c.heads = 4;
  c.heads_k = 2;
  return c;
}

void add_feature_cases(std::vector<AttnConfig>& out, DType dt, int64_t d) {
  // seqlen shapes, including Sq > Sk, Sq == 1 and empty sequences, each causal and not
  const int64_t shapes[][2] = {{1, 1}, {1, 77}, {77, 1}, {64, 64}, {100, 37}, {37, 100}, {129, 250}, {0, 10}, {10, 0}};
  for (auto& s : shapes)
    for (bool causal : {false, true}) {
      AttnConfig c = base(dt, d);
      c.seqlen_q = s[0];
      c.seqlen_k = s[1];
      c.causal = causal;
      out.push_back(c);
    }
  // GQA ratios 1, 2, 4, 8 (MQA)
  for (int64_t hk : {8, 4, 2, 1}) {
    AttnConfig c = base(dt, d);
    c.heads = 8;
    c.heads_k = hk;
    c.causal = hk == 2;
    out.push_back(c);
  }
  // sliding windows, with and without causal
  const int windows[][2] = {{16, 0}, {-1, 8}, {8, 8}, {0, 0}, {5, -1}};
  for (auto& w : windows) {
    AttnConfig c = base(dt, d);
    c.seqlen_q = 70;
    c.seqlen_k = 90;
    c.window_left = w[0];
    c.window_right = w[1];
    out.push_back(c);
  }
  {
    AttnConfig c = base(dt, d);
    c.causal = true;
    c.window_left = 12;
    out.push_back(c);
  }
  // score modifiers
  for (bool per_batch : {false, true}) {
    AttnConfig c = base(dt, d);
    c.alibi = true;
    c.alibi_per_batch = per_batch;
    c.causal = per_batch;
    out.push_back(c);
  }
  for (float cap : {30.0f, 2.0f}) {
    AttnConfig c = base(dt, d);
    c.softcap = cap;
    c.softmax_scale = 0.5f;
    out.push_back(c);
  }
  {
    AttnConfig c = base(dt, d);
    c.softmax_scale = 0.02f;
    c.causal = true;
    out.push_back(c);
  }
  // dropout
  for (float p : {0.1f, 0.5f}) {
    AttnConfig c = base(dt, d);
    c.dropout_p = p;
    c.causal = p > 0.3f;
    c.dropout_seed = 42 + uint64_t(p * 100);
    c.dropout_offset = 7;
    out.push_back(c);
  }
  // ragged varlen, with empty sequences
  {
    AttnConfig c = base(dt, d);
    c.varlen_q = {17, 0, 64, 1, 33};
    c.varlen_k = {40, 5, 64, 9, 0};
    out.push_back(c);
    c.causal = true;
    out.push_back(c);
    c.causal = false;
    c.window_left = 6;
    c.window_right = 3;
    c.alibi = true;
    out.push_back(c);
    c.window_left = c.window_right = -1;
    c.alibi = false;
    c.dropout_p = 0.2f;
    out.push_back(c);
  }
}

// Each odd head dim in each dtype, alternating causal, and as a ragged varlen batch with GQA.
void add_odd_head_dim_cases(std::vector<AttnConfig>& out) {
  int n = 0;
  for (DType dt : kDtypes)
    for (int64_t d : kOddHeadDims) {
      AttnConfig c = base(dt, d);
      c.causal = n++ % 2 == 1;
      out.push_back(c);
    }
  for (int64_t d : kOddHeadDims) {
    AttnConfig c = base(DType::bf16, d);
    c.heads = 6;
    c.heads_k = 2;
    c.varlen_q = {9, 0, 33};
    c.varlen_k = {20, 4, 33};
    c.causal = true;
    out.push_back(c);
  }
}

// Paged K/V and seqused_k in the varlen forward (flash_attn_varlen_func with block_table, vLLM's call).
void add_paged_cases(std::vector<AttnConfig>& out) {
  auto ragged = [](DType dt, int64_t d) {
    AttnConfig c = base(dt, d);
    c.varlen_q = {17, 0, 64, 1, 33};
    c.varlen_k = {40, 5, 64, 9, 0};
    return c;
  };
  // page sizes: single rows, odd, small power of two, larger than every sequence; each causal and not
  for (int64_t page : {1, 3, 16, 256})
    for (bool causal : {false, true}) {
      AttnConfig c = ragged(DType::f16, 64);
      c.page_size = page;
      c.causal = causal;
      out.push_back(c);
    }
  // seqused_k over contiguous and paged keys, with the masks aligned to the used count
  for (int64_t page : {0, 16}) {
    AttnConfig c = ragged(DType::bf16, 128);
    c.page_size = page;
    c.seqused_k = true;
    c.causal = true;
    out.push_back(c);
  }
  // GQA / MQA, window, softcap, ALiBi, an odd head dim, f32
  {
    AttnConfig c = ragged(DType::bf16, 64);
    c.page_size = 16;
    c.heads = 8;
    c.heads_k = 1;
    c.causal = true;
    out.push_back(c);
    c.heads_k = 4;
    c.causal = false;
    c.window_left = 6;
    c.window_right = 3;
    out.push_back(c);
    c.window_left = c.window_right = -1;
    c.softcap = 5.0f;
    c.alibi = true;
    c.alibi_per_batch = true;
    c.seqused_k = true;
    out.push_back(c);
    AttnConfig odd = ragged(DType::f16, 59);
    odd.page_size = 5;
    odd.causal = true;
    out.push_back(odd);
    AttnConfig f = ragged(DType::f32, 40);
    f.page_size = 7;
    f.seqused_k = true;
    out.push_back(f);
  }
  // page sizes around cuda_sm90's boxes (the page/tile divisor): 8 (sixteen boxes per 128-key tile), 48
  // (pages across tiles) at D = 256 (an 80-key tile straddling pages)
  for (auto [page, d] : {std::pair{int64_t(8), int64_t(128)}, std::pair{int64_t(48), int64_t(256)}}) {
    AttnConfig c = ragged(DType::bf16, d);
    c.page_size = page;
    c.heads_k = 1;
    c.causal = page == 48;
    out.push_back(c);
  }
  // chunked prefill: decode steps (1 query against a long context) and 2k-token prefills in one call, at
  // vLLM's page size (a page per 16 keys: the sm80 forward looks up each row's page) and at 256 (flash-attn's
  // tests: a key tile lies in one page)
  for (auto [page, d] : {std::pair{int64_t(16), int64_t(64)}, std::pair{int64_t(256), int64_t(128)}}) {
    AttnConfig c = base(DType::bf16, d);
    c.heads = 4;
    c.heads_k = 2;
    c.varlen_q = {1, 2048, 1, 300, 1};
    c.varlen_k = {1500, 2048, 2047, 812, 1};
    c.page_size = page;
    c.seqused_k = true;
    c.causal = true;
    out.push_back(c);
  }
}

}  // namespace

std::vector<AttnConfig> forward_cases() {
  std::vector<AttnConfig> out;
  for (DType dt : kDtypes)
    for (int64_t d : kHeadDims) {
      AttnConfig c = base(dt, d);
      c.causal = (d / 8) % 2 == 1;
      out.push_back(c);
    }
  for (DType dt : kDtypes) add_feature_cases(out, dt, dt == DType::f32 ? 40 : 64);
  add_feature_cases(out, DType::bf16, 128);
  add_odd_head_dim_cases(out);
  add_feature_cases(out, DType::f16, 59);
  add_paged_cases(out);
  return out;
}

std::vector<AttnConfig> backward_cases() {
  std::vector<AttnConfig> out;
  for (DType dt : kDtypes)
    for (int64_t d : kHeadDims) {
      AttnConfig c = base(dt, d);
      c.seqlen_q = 29;
      c.seqlen_k = 41;
      c.causal = (d / 8) % 2 == 0;
      out.push_back(c);
    }
  add_feature_cases(out, DType::f16, 64);
  add_feature_cases(out, DType::bf16, 96);
  add_odd_head_dim_cases(out);
  add_feature_cases(out, DType::bf16, 111);
  return out;
}

std::vector<AttnConfig> smoke_cases() {
  std::vector<AttnConfig> out;
  for (DType dt : {DType::f16, DType::bf16}) {
    AttnConfig c = base(dt, 64);
    out.push_back(c);
    c.causal = true;
    c.seqlen_q = 100;
    c.seqlen_k = 37;
    out.push_back(c);
  }
  AttnConfig c = base(DType::bf16, 128);
  c.varlen_q = {17, 0, 64};
  c.varlen_k = {40, 5, 64};
  c.causal = true;
  out.push_back(c);
  return out;
}

}  // namespace fa_test
