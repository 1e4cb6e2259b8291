#include "common/philox.h"
#include "cpu/reference/gather.h"
#include "cpu/reference/head_math.h"
#include "cpu/reference/parallel_pairs.h"
#include "cpu/reference/reference.h"

namespace flashattn::detail::reference {

DropoutMask make_dropout(const DropoutParams& d, int64_t b, int64_t h, int64_t heads) {
  DropoutMask m;
  if (d.p > 0.0f) {
    m.keep = [d, b, h, heads](int64_t i, int64_t j) { return dropout_keep(d, b, h, heads, i, j); };
    m.scale = 1.0 / (1.0 - double(d.p));
  }
  return m;
}

ScoreMod<double> make_mod(const ScoreParams& s, int64_t b, int64_t h) {
  return ScoreMod<double>{double(s.softmax_scale), double(s.softcap), double(alibi_slope(s, b, h))};
}

namespace {

// The sq keys (or values) of sequence b, kv head hk, contiguous or paged (common/score.h key_offset).
void gather_keys(const FwdProblem& p, const RowsView& kv, const SeqRange& r, int64_t b, int64_t hk,
                 std::vector<double>& dst) {
  const int64_t D = p.head_dim;
  dst.resize(size_t(r.sk * D));
  for (int64_t j = 0; j < r.sk; ++j) {
    const int64_t base = key_offset(p, kv, r, b, j, hk);
    for (int64_t d = 0; d < D; ++d) dst[j * D + d] = load_float(kv.ptr, base + d, p.dtype);
  }
}

// FP8 inputs: the stored values times their (batch, kv head) factor, in fp64 (exact: a float8 value times
// an fp32 factor has at most 28 significant bits).
void descale(std::vector<double>& x, const DescaleView& d, int64_t b, int64_t hk) {
  if (d.ptr == nullptr) return;
  const double f = d.at(b, hk);
  for (double& v : x) v *= f;
}

}  // namespace

void forward(const FwdProblem& p, Stream) {
  const int64_t group = p.group_size();
  parallel_pairs(p.batch, p.heads, [&](int64_t b, int64_t h) {
    const SeqRange r = seq_range(p, b);
    HeadInputs in;
    in.sq = r.sq;
    in.sk = r.sk;
    in.dim = p.head_dim;
    gather_rows(p.q, p.dtype, b, r.q_start, r.sq, h, p.head_dim, in.q);
    gather_keys(p, p.k, r, b, h / group, in.k);
    gather_keys(p, p.v, r, b, h / group, in.v);
    descale(in.q, p.q_descale, b, h / group);
    descale(in.k, p.k_descale, b, h / group);
    descale(in.v, p.v_descale, b, h / group);
    std::vector<double> out, lse;
    attend(in, make_mask(p.score, r.sq, r.sk), make_mod(p.score, b, h), make_dropout(p.dropout, b, h, p.heads), out,
           lse);
    scatter_rows(p.out, p.out_dtype(), b, r.q_start, r.sq, h, p.head_dim, out);
    store_lse(p.lse, b, r.q_start, h, lse);
  });
}

}  // namespace flashattn::detail::reference
