#include "naive.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/philox.h"
#include "common/score.h"
#include "cpu/common/elem.h"

namespace fabench {

namespace {

using flashattn::detail::round_to;

// One (batch, head) of the naive computation: forward rows, then (optionally) the gradients of its q rows
// and its contribution to dk/dv of its kv head, kept per query head and summed over the group afterwards.
struct HeadJob {
  const NaiveProblem& p;
  int64_t b, h, hk;
  // Gradient sums run in double (as the test harness's naive does) so the yardstick does not drift with
  // the number of keys; each element is rounded to the dtype once at the end.
  double* dk_part;  // (keys, dim) for this query head
  double* dv_part;

  float rnd(float x) const { return round_to(p.dtype, x); }
  const float* q_row(int64_t i) const { return p.q + ((b * p.rows + i) * p.heads + h) * p.dim; }
  const float* dout_row(int64_t i) const { return p.dout + ((b * p.rows + i) * p.heads + h) * p.dim; }
  const float* k_row(int64_t j) const { return p.k + ((b * p.keys + j) * p.heads_k + hk) * p.dim; }
  const float* v_row(int64_t j) const { return p.v + ((b * p.keys + j) * p.heads_k + hk) * p.dim; }

  void run(NaiveResult& r, bool with_backward) const {
    const flashattn::detail::Mask mask{p.rows, p.keys, p.window_left, p.window_right};
    const flashattn::detail::ScoreMod<float> mod{p.scale, p.softcap, 0.0f};
    const float drop_scale = rnd(1.0f / (1.0f - p.dropout.p));
    std::vector<float> qk(size_t(p.keys)), prob(size_t(p.keys)), keep(size_t(p.keys));
    for (int64_t i = 0; i < p.rows; ++i) {
      const int64_t jb = mask.key_begin(i), je = mask.key_end(i);
      float* out = r.out.data() + ((b * p.rows + i) * p.heads + h) * p.dim;
      float& lse = r.lse[size_t((b * p.heads + h) * p.rows + i)];
      if (jb >= je) {  // no visible key: out stays 0, LSE +inf (flash-attn's convention)
        lse = std::numeric_limits<float>::infinity();
        continue;
      }
      const float* qi = q_row(i);
      float row_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = jb; j < je; ++j) {
        float dot = 0.0f;
        const float* kj = k_row(j);
        for (int64_t d = 0; d < p.dim; ++d) dot += qi[d] * kj[d];
        qk[size_t(j)] = rnd(dot);
        prob[size_t(j)] = rnd(mod(qk[size_t(j)], mask.diagonal(i) - j));
        row_max = std::max(row_max, prob[size_t(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = jb; j < je; ++j) sum += std::exp(prob[size_t(j)] - row_max);
      lse = row_max + std::log(sum);
      for (int64_t j = jb; j < je; ++j) {
        prob[size_t(j)] = rnd(std::exp(prob[size_t(j)] - row_max) / sum);
        keep[size_t(j)] = 1.0f;
        if (p.dropout.p > 0.0f)
          keep[size_t(j)] =
              flashattn::detail::dropout_keep(p.dropout, b, h, p.call_heads, p.row_offset + i, j) ? drop_scale : 0.0f;
      }
      for (int64_t d = 0; d < p.dim; ++d) {
        float acc = 0.0f;
        for (int64_t j = jb; j < je; ++j) acc += rnd(prob[size_t(j)] * keep[size_t(j)]) * v_row(j)[d];
        out[d] = rnd(acc);
      }
      if (!with_backward) continue;

      const float* gi = dout_row(i);
      std::vector<double> dq(size_t(p.dim), 0.0);
      float row_dot = 0.0f;  // D_i = rowsum(dO * O)
      for (int64_t d = 0; d < p.dim; ++d) row_dot += gi[d] * out[d];
      row_dot = rnd(row_dot);
      for (int64_t j = jb; j < je; ++j) {
        const float* vj = v_row(j);
        float dov = 0.0f;
        for (int64_t d = 0; d < p.dim; ++d) dov += gi[d] * vj[d];
        const float dp = rnd(rnd(dov) * keep[size_t(j)]);
        const float ds = rnd(rnd(prob[size_t(j)] * (dp - row_dot)) * rnd(mod.dlogit_dqk(qk[size_t(j)])));
        const float pz = rnd(prob[size_t(j)] * keep[size_t(j)]);
        const float* kj = k_row(j);
        for (int64_t d = 0; d < p.dim; ++d) {
          dq[size_t(d)] += ds * kj[d];
          dk_part[j * p.dim + d] += ds * qi[d];
          dv_part[j * p.dim + d] += pz * gi[d];
        }
      }
      float* dq_out = r.dq.data() + ((b * p.rows + i) * p.heads + h) * p.dim;
      for (int64_t d = 0; d < p.dim; ++d) dq_out[d] = rnd(float(dq[size_t(d)]));
    }
  }
};

}  // namespace

NaiveResult naive_attention(const NaiveProblem& p, bool with_backward) {
  NaiveResult r;
  const int64_t q_numel = p.batches * p.rows * p.heads * p.dim;
  const int64_t k_numel = p.batches * p.keys * p.heads_k * p.dim;
  const int64_t head_kv = p.keys * p.dim;  // one query head's share of dk or dv
  r.out.assign(size_t(q_numel), 0.0f);
  r.lse.assign(size_t(p.batches * p.heads * p.rows), 0.0f);
  std::vector<double> dk_parts, dv_parts;
  if (with_backward) {
    r.dq.assign(size_t(q_numel), 0.0f);
    dk_parts.assign(size_t(p.batches * p.heads * head_kv), 0.0);
    dv_parts.assign(dk_parts.size(), 0.0);
  }
  const int64_t group = p.heads / p.heads_k;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < p.batches; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const size_t part = size_t((b * p.heads + h) * head_kv);
      double* dk = with_backward ? dk_parts.data() + part : nullptr;
      double* dv = with_backward ? dv_parts.data() + part : nullptr;
      HeadJob{p, b, h, h / group, dk, dv}.run(r, with_backward);
    }
  }
  if (!with_backward) return r;

  std::vector<double> dk(size_t(k_numel), 0.0), dv(size_t(k_numel), 0.0);
  for (int64_t b = 0; b < p.batches; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t j = 0; j < p.keys; ++j)
        for (int64_t d = 0; d < p.dim; ++d) {
          const size_t from = size_t((b * p.heads + h) * head_kv + j * p.dim + d);
          const size_t to = size_t(((b * p.keys + j) * p.heads_k + h / group) * p.dim + d);
          dk[to] += dk_parts[from];
          dv[to] += dv_parts[from];
        }
  r.dk.resize(dk.size());
  r.dv.resize(dv.size());
  for (size_t i = 0; i < dk.size(); ++i) {
    r.dk[i] = round_to(p.dtype, float(dk[i]));
    r.dv[i] = round_to(p.dtype, float(dv[i]));
  }
  return r;
}

}  // namespace fabench
