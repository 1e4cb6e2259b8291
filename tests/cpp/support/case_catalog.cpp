#include "case_catalog.h"

namespace fa_test {

namespace {

const int64_t kHeadDims[] = {8, 32, 40, 64, 80, 96, 128, 160, 192, 256};
const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

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
