#include "naive_lowp.h"

#include <cmath>
#include <limits>

#include "common/philox.h"
#include "common/score.h"
#include "cpu/common/elem.h"

namespace fa_test {

using namespace flashattn::detail;

namespace {

struct Layout {
  int64_t batch_stride, row_stride, head_stride;
};

Layout layout_of(const HostTensor& t) {
  const auto& s = t.shape();
  if (s.size() == 4) return {s[1] * s[2] * s[3], s[2] * s[3], s[3]};
  return {0, s[1] * s[2], s[2]};
}

}  // namespace

NaiveOutputs naive_lowp(const AttnInputs& in, bool with_backward, bool p_in_e4m3) {
  const AttnConfig& c = in.cfg;
  const DType dt = c.dtype;
  auto rnd = [dt](float x) { return round_to(dt, x); };
  const int64_t H = c.heads, Hk = c.heads_k, D = c.head_dim, group = Hk > 0 ? H / Hk : 1;  // no heads: no work
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double();
  const std::vector<double> dout = in.dout.to_double();
  const Layout lq = layout_of(in.q), lk = layout_of(in.k);
  NaiveOutputs r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(size_t(in.q.numel() / D), 0.0);
  // Gradients are accumulated in fp32, as a same-dtype naive computation would (for f32 storage this is
  // what makes the bound that of an fp32 computation rather than of an fp64 one).
  std::vector<float> dq_acc, dk_acc, dv_acc;
  if (with_backward) {
    dq_acc.assign(q.size(), 0.0f);
    dk_acc.assign(k.size(), 0.0f);
    dv_acc.assign(v.size(), 0.0f);
  }
  const float scale = c.softmax_scale ? *c.softmax_scale : float(1.0 / std::sqrt(double(D)));
  const DropoutParams drop{c.dropout_p, c.dropout_seed, c.dropout_offset};
  const float drop_scale = rnd(1.0f / (1.0f - c.dropout_p));
  const float inf = std::numeric_limits<float>::infinity();

  for (int64_t b = 0; b < c.num_seqs(); ++b) {
    int64_t q0 = 0, k0 = 0, sq = c.seqlen_q, sk = c.seqlen_k;
    if (c.varlen()) {
      q0 = in.cu_seqlens_q.i32()[b];
      k0 = in.cu_seqlens_k.i32()[b];
      sq = c.varlen_q[b];
      sk = c.varlen_k[b];
    }
    const Mask mask{sq, sk, c.window_left, c.causal ? 0 : c.window_right};
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      const float slope = c.alibi ? float(in.alibi.get(c.alibi_per_batch ? b * H + h : h)) : 0.0f;
      const ScoreMod<float> mod{scale, c.softcap, slope};
      auto qi = [&](int64_t i, int64_t d) {
        return (b * lq.batch_stride + (q0 + i) * lq.row_stride + h * lq.head_stride) + d;
      };
      auto kj = [&](int64_t j, int64_t d) {
        return (b * lk.batch_stride + (k0 + j) * lk.row_stride + hk * lk.head_stride) + d;
      };
      auto lse_at = [&](int64_t i) {
        return c.varlen() ? h * int64_t(r.lse.size() / H) + q0 + i : (b * H + h) * sq + i;
      };
      std::vector<float> qk(static_cast<size_t>(sq * sk), 0.0f), p(size_t(sq * sk), 0.0f), z(size_t(sq * sk), 0.0f);
      // Rows are independent in the forward (each writes only its own qk/p/z row, out row and LSE), so
      // they run in parallel with unchanged arithmetic: the GPU scale tests' 2^20-key rows took minutes.
#pragma omp parallel for schedule(dynamic)
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t jb = mask.key_begin(i), je = mask.key_end(i);
        if (jb >= je) {
          r.lse[lse_at(i)] = inf;
          continue;
        }
        float m = -inf;
        for (int64_t j = jb; j < je; ++j) {
          float acc = 0.0f;
          for (int64_t d = 0; d < D; ++d) acc += float(q[qi(i, d)]) * float(k[kj(j, d)]);
          qk[i * sk + j] = rnd(acc);
          const float s = rnd(mod(qk[i * sk + j], mask.diagonal(i) - j));
          p[i * sk + j] = s;
          m = std::max(m, s);
        }
        float sum = 0.0f;
        for (int64_t j = jb; j < je; ++j) sum += std::exp(p[i * sk + j] - m);
        r.lse[lse_at(i)] = m + std::log(sum);
        constexpr float kP8 = 256.0f;
        for (int64_t j = jb; j < je; ++j) {
          p[i * sk + j] = p_in_e4m3 ? round_to(DType::fp8_e4m3, kP8 * std::exp(p[i * sk + j] - m)) / (kP8 * sum)
                                    : rnd(std::exp(p[i * sk + j] - m) / sum);
          z[i * sk + j] = c.dropout_p > 0 ? (dropout_keep(drop, b, h, H, i, j) ? drop_scale : 0.0f) : 1.0f;
        }
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0.0f;
          for (int64_t j = jb; j < je; ++j) {
            const float pz = p[i * sk + j] * z[i * sk + j];
            acc += (p_in_e4m3 ? pz : rnd(pz)) * float(v[kj(j, d)]);
          }
          r.out[qi(i, d)] = rnd(acc);
        }
      }
      if (!with_backward) continue;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t jb = mask.key_begin(i), je = mask.key_end(i);
        float row_dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) row_dot += float(dout[qi(i, d)]) * float(r.out[qi(i, d)]);
        row_dot = rnd(row_dot);
        for (int64_t j = jb; j < je; ++j) {
          float dov = 0.0f;
          for (int64_t d = 0; d < D; ++d) dov += float(dout[qi(i, d)]) * float(v[kj(j, d)]);
          const float dp = rnd(rnd(dov) * z[i * sk + j]);
          const float ds = rnd(rnd(p[i * sk + j] * (dp - row_dot)) * rnd(mod.dlogit_dqk(qk[i * sk + j])));
          const float pz = rnd(p[i * sk + j] * z[i * sk + j]);
          for (int64_t d = 0; d < D; ++d) {
            dq_acc[qi(i, d)] += ds * float(k[kj(j, d)]);
            dk_acc[kj(j, d)] += ds * float(q[qi(i, d)]);
            dv_acc[kj(j, d)] += pz * float(dout[qi(i, d)]);
          }
        }
      }
    }
  }
  if (with_backward) {
    for (float x : dq_acc) r.dq.push_back(rnd(x));
    for (float x : dk_acc) r.dk.push_back(rnd(x));
    for (float x : dv_acc) r.dv.push_back(rnd(x));
  }
  return r;
}

}  // namespace fa_test
