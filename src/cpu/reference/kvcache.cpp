// forward_kvcache of the reference: append (with rotary) into the cache, then attend in fp64. An FP8 cache
// (KVCacheProblem::cache_dtype) is read as stored value x factor and written as real value / factor.

#include "common/kvcache.h"

#include "cpu/common/elem.h"
#include "cpu/reference/gather.h"
#include "cpu/reference/head_math.h"
#include "cpu/reference/parallel_pairs.h"
#include "cpu/reference/reference.h"

namespace flashattn::detail::reference {

namespace {

// Rotates the first rotary.dim values of x (fp64) at position pos.
void rotate(const RotaryParams& r, DType dt, int64_t pos, double* x) {
  for (int64_t pair = 0; pair < r.dim / 2; ++pair) {
    const double c = load_float(r.cos, pos * r.cos_row_stride + pair, dt);
    const double s = load_float(r.sin, pos * r.sin_row_stride + pair, dt);
    int64_t i0, i1;
    rotary_pair(r, pair, &i0, &i1);
    const double x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * c - x1 * s;
    x[i1] = x0 * s + x1 * c;
  }
}

void append_new_tokens(const KVCacheProblem& p) {
  const int64_t D = p.head_dim;
  parallel_pairs(p.batch, p.heads_k, [&](int64_t b, int64_t hk) {
    const CacheSeq s = cache_seq(p, b);
    std::vector<double> k, v;
    gather_rows(p.k_new, p.dtype, b, 0, p.seqlen_new, hk, D, k);
    gather_rows(p.v_new, p.dtype, b, 0, p.seqlen_new, hk, D, v);
    for (int64_t t = 0; t < p.seqlen_new; ++t) {
      const int64_t pos = s.seqlen_before + t;
      if (p.rotary.cos) rotate(p.rotary, p.dtype, pos, &k[t * D]);
      const int64_t ko = cache_offset(p.cache, s, b, pos, hk, false);
      const int64_t vo = cache_offset(p.cache, s, b, pos, hk, true);
      // An FP8 cache stores the real value over its factor (common/convert.h's e4m3 rounding).
      const double kd = p.k_descale.at(b, hk), vd = p.v_descale.at(b, hk);
      for (int64_t d = 0; d < D; ++d) {
        store_float(p.cache.k, ko + d, p.cache_dtype, float(k[t * D + d] / kd));
        store_float(p.cache.v, vo + d, p.cache_dtype, float(v[t * D + d] / vd));
      }
    }
  });
}

}  // namespace

void forward_kvcache(const KVCacheProblem& p, Stream) {
  if (p.seqlen_new > 0) append_new_tokens(p);
  const int64_t D = p.head_dim, group = p.group_size();
  parallel_pairs(p.batch, p.heads, [&](int64_t b, int64_t h) {
    const CacheSeq s = cache_seq(p, b);
    HeadInputs in;
    in.sq = p.seqlen_q;
    in.sk = s.seqlen_k;
    in.dim = D;
    gather_rows(p.q, p.dtype, b, 0, p.seqlen_q, h, D, in.q);
    if (p.rotary.cos)
      for (int64_t i = 0; i < in.sq; ++i) rotate(p.rotary, p.dtype, rotary_q_position(p, s, i), &in.q[i * D]);
    in.k.resize(size_t(in.sk * D));
    in.v.resize(size_t(in.sk * D));
    const double kd = p.k_descale.at(b, h / group), vd = p.v_descale.at(b, h / group);  // 1 unless FP8
    for (int64_t j = 0; j < in.sk; ++j) {
      const int64_t pos = s.leftpad + j;
      const int64_t ko = cache_offset(p.cache, s, b, pos, h / group, false);
      const int64_t vo = cache_offset(p.cache, s, b, pos, h / group, true);
      for (int64_t d = 0; d < D; ++d) {
        in.k[j * D + d] = load_float(p.cache.k, ko + d, p.cache_dtype) * kd;
        in.v[j * D + d] = load_float(p.cache.v, vo + d, p.cache_dtype) * vd;
      }
    }
    std::vector<double> out, lse;
    attend(in, make_mask(p.score, in.sq, in.sk), make_mod(p.score, b, h), DropoutMask{}, out, lse);
    scatter_rows(p.out, p.dtype, b, 0, p.seqlen_q, h, D, out);
    store_lse(p.lse, b, 0, h, lse);
  });
}

}  // namespace flashattn::detail::reference
