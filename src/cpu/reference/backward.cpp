// Exact gradients of the forward function in fp64. The softmax is recomputed from q and k (the
// out and softmax_lse passed by the caller are not needed by this oracle).

#include "cpu/reference/gather.h"
#include "cpu/reference/head_math.h"
#include "cpu/reference/parallel_pairs.h"
#include "cpu/reference/reference.h"

namespace flashattn::detail::reference {

void backward(const BwdProblem& p, Stream) {
  const int64_t group = p.group_size();
  const int64_t D = p.head_dim;
  parallel_pairs(p.batch, p.heads_k, [&](int64_t b, int64_t hk) {
    const SeqRange r = seq_range(p, b);
    HeadInputs in;
    in.sq = r.sq;
    in.sk = r.sk;
    in.dim = D;
    gather_rows(p.k, p.dtype, b, r.k_start, r.sk, hk, D, in.k);
    gather_rows(p.v, p.dtype, b, r.k_start, r.sk, hk, D, in.v);
    std::vector<double> dk(static_cast<size_t>(r.sk * D), 0.0), dv(size_t(r.sk * D), 0.0);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      gather_rows(p.q, p.dtype, b, r.q_start, r.sq, h, D, in.q);
      std::vector<double> dout;
      gather_rows(p.dout, p.dtype, b, r.q_start, r.sq, h, D, dout);
      const Mask mask = make_mask(p.score, r.sq, r.sk);
      const ScoreMod<double> mod = make_mod(p.score, b, h);
      const DropoutMask drop = make_dropout(p.dropout, b, h, p.heads);
      const std::vector<double> qk = dot_products(in);
      std::vector<double> probs, lse;
      softmax_probs(in, qk, mask, mod, probs, lse);

      std::vector<double> dq(static_cast<size_t>(r.sq * D), 0.0);
      for (int64_t i = 0; i < r.sq; ++i) {
        const int64_t begin = mask.key_begin(i), end = mask.key_end(i);
        // dp_ij: gradient w.r.t. the undropped probability; row_dot = sum_j p_ij dp_ij = dO_i . O_i.
        std::vector<double> dp(static_cast<size_t>(r.sk), 0.0);
        double row_dot = 0;
        for (int64_t j = begin; j < end; ++j) {
          const double z = drop.keep ? (drop.keep(i, j) ? drop.scale : 0.0) : 1.0;
          double dov = 0;
          for (int64_t d = 0; d < D; ++d) dov += dout[i * D + d] * in.v[j * D + d];
          dp[j] = dov * z;
          const double pz = probs[i * r.sk + j] * z;
          for (int64_t d = 0; d < D; ++d) dv[j * D + d] += pz * dout[i * D + d];
          row_dot += probs[i * r.sk + j] * dp[j];
        }
        for (int64_t j = begin; j < end; ++j) {
          const double ds = probs[i * r.sk + j] * (dp[j] - row_dot) * mod.dlogit_dqk(qk[i * r.sk + j]);
          for (int64_t d = 0; d < D; ++d) {
            dq[i * D + d] += ds * in.k[j * D + d];
            dk[j * D + d] += ds * in.q[i * D + d];
          }
        }
      }
      scatter_rows(p.dq, p.dtype, b, r.q_start, r.sq, h, D, dq);
    }
    scatter_rows(p.dk, p.dtype, b, r.k_start, r.sk, hk, D, dk);
    scatter_rows(p.dv, p.dtype, b, r.k_start, r.sk, hk, D, dv);
  });
}

}  // namespace flashattn::detail::reference
