#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/criterion.h"
#include "flashattn/api.h"
#include "naive.h"

namespace fabench {

namespace {

using flashattn::Tensor;
namespace criterion = flashattn::detail::criterion;

// Query-key pairs the fp64 reference may materialise per check (it keeps the full Sq x Sk score matrix
// of a head in fp64): about a second of reference work on a few cores, and bounded memory.
constexpr int64_t kReferencePairBudget = int64_t(1) << 24;

// A (batches, rows, heads, dim) window, from row `row0` and head 0, of a dense (B, seq, heads_total, dim)
// tensor.
struct Window {
  int64_t seq = 0, heads_total = 0, dim = 0;
  int64_t batches = 0, row0 = 0, rows = 0, heads = 0;

  int64_t numel() const { return batches * rows * heads * dim; }
  int64_t full_index(int64_t k) const {
    const int64_t d = k % dim, h = (k / dim) % heads, i = (k / (dim * heads)) % rows, b = k / (dim * heads * rows);
    return ((b * seq + row0 + i) * heads_total + h) * dim + d;
  }
};

// The LSE of a window: (batches, heads, rows) of the call's (B, heads_total, seq).
int64_t lse_full_index(const Window& w, int64_t k) {
  const int64_t i = k % w.rows, h = (k / w.rows) % w.heads, b = k / (w.rows * w.heads);
  return (b * w.heads_total + h) * w.seq + w.row0 + i;
}

std::vector<float> gather(const HostArray& a, const Window& w) {
  std::vector<float> out(size_t(w.numel()));
  for (int64_t k = 0; k < w.numel(); ++k) out[size_t(k)] = a.get(w.full_index(k));
  return out;
}

std::string format_value(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Returns "" when `got` meets the criterion on the window, else what failed.
template <typename FullIndex>
std::string compare(const char* what, const HostArray& got, FullIndex full_index, const std::vector<float>& ref,
                    const std::vector<float>& naive, DType dtype) {
  if (!got.present()) return std::string(what) + ": not produced";
  double err = 0.0, naive_err = 0.0, scale = 1.0;
  size_t worst = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    const double e = criterion::difference(got.get(full_index(int64_t(k))), ref[k]);
    if (e > err || k == 0) {
      err = e;
      worst = k;
    }
    naive_err = std::max(naive_err, criterion::difference(naive[k], ref[k]));
    if (std::isfinite(ref[k])) scale = std::max(scale, std::fabs(double(ref[k])));
  }
  const double floor = criterion::error_floor(dtype, scale);
  if (err <= 2.0 * naive_err + floor) return {};
  return std::string(what) + ": max|got-ref| " + format_value(err) + " > 2 x " + format_value(naive_err) + " (naive " +
         flashattn::dtype_name(dtype) + ") + " + format_value(floor) + "; worst got " +
         format_value(got.get(full_index(int64_t(worst)))) + ", ref " + format_value(ref[worst]);
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

}  // namespace

CheckPlan plan_check(const BenchConfig& c) {
  CheckPlan p;
  const int64_t pairs_per_head = c.seqlen_q * c.seqlen_k;
  p.batches = c.batch;
  p.heads = c.heads;
  p.heads_k = c.heads_k;
  if (c.batch * c.heads * pairs_per_head <= kReferencePairBudget) return p;

  const int64_t group = c.heads / c.heads_k;
  auto choose_heads = [&](bool whole_groups) {
    if (whole_groups) {
      p.heads_k = group >= 2 ? 1 : std::min<int64_t>(c.heads_k, 2);
      p.heads = p.heads_k * group;
    } else {
      // At most two query heads; with GQA they share kv head 0 in the slice exactly as in the call.
      p.heads = std::min<int64_t>(c.heads, 2);
      p.heads_k = (p.heads + group - 1) / group;
    }
  };
  // dk/dv of a kv head sum over all query heads of its group: keep whole groups while that is affordable.
  bool whole_groups = c.has_backward();
  p.batches = 1;
  choose_heads(whole_groups);
  if (p.heads * pairs_per_head > kReferencePairBudget) {
    if (c.dropout > 0.0f) {
      // The dropout mask depends on the query row index, which slicing rows would shift.
      p.skip_reason = "too large for the fp64 reference, and dropout rules out slicing rows";
      return p;
    }
    whole_groups = false;
    choose_heads(false);
    const int64_t rows = std::clamp<int64_t>(kReferencePairBudget / (p.heads * c.seqlen_k), 1, c.seqlen_q);
    p.row_begin = c.seqlen_q - rows;
  }
  p.kv_grads = whole_groups && p.row_begin == 0;

  std::vector<std::string> parts;
  if (p.batches < c.batch) parts.push_back("b0");
  if (p.heads < c.heads) parts.push_back(p.heads == 1 ? "h0" : "h0-" + std::to_string(p.heads - 1));
  if (p.row_begin > 0) parts.push_back("rows " + std::to_string(p.row_begin) + "-" + std::to_string(c.seqlen_q - 1));
  if (c.has_backward() && !p.kv_grads) parts.push_back("no dk/dv");
  p.label = join(parts, ",");
  return p;
}

Checker::Checker(const BenchConfig& cfg, const HostInputs& inputs)
    : cfg_(cfg), inputs_(inputs), plan_(plan_check(cfg)) {}

void Checker::prepare() {
  if (reference_) return;
  const BenchConfig& c = cfg_;
  const int64_t rows = c.seqlen_q - plan_.row_begin;
  const Window qw{c.seqlen_q, c.heads, c.head_dim, plan_.batches, plan_.row_begin, rows, plan_.heads};
  const Window kw{c.seqlen_k, c.heads_k, c.head_dim, plan_.batches, 0, c.seqlen_k, plan_.heads_k};
  std::vector<float> q = gather(inputs_.q, qw), k = gather(inputs_.k, kw), v = gather(inputs_.v, kw);
  std::vector<float> dout = c.has_backward() ? gather(inputs_.dout, qw) : std::vector<float>{};

  // The reference: cpu_reference through the public API on the f32 upcast (exact) window.
  const int64_t nb = plan_.batches, nh = plan_.heads, nhk = plan_.heads_k, D = c.head_dim, Sk = c.seqlen_k;
  auto f32 = [](std::vector<float>& buf, std::initializer_list<int64_t> shape) {
    return Tensor::contiguous(buf.data(), DType::f32, shape);
  };
  Expected ref;
  ref.out.assign(size_t(qw.numel()), 0.0f);
  ref.lse.assign(size_t(nb * nh * rows), 0.0f);
  flashattn::BwdParams p;
  p.q = f32(q, {nb, rows, nh, D});
  p.k = f32(k, {nb, Sk, nhk, D});
  p.v = f32(v, {nb, Sk, nhk, D});
  p.out = f32(ref.out, {nb, rows, nh, D});
  p.softmax_lse = f32(ref.lse, {nb, nh, rows});
  p.options.causal = c.causal;
  p.options.window_left = c.window_left;
  p.options.window_right = c.window_right;
  p.options.softcap = c.softcap;
  p.options.backend = "cpu_reference";
  p.dropout_p = c.dropout;
  p.seed = c.dropout_seed;
  p.offset = c.dropout_offset;
  flashattn::forward(p);
  if (c.has_backward()) {
    ref.dq.assign(q.size(), 0.0f);
    ref.dk.assign(k.size(), 0.0f);
    ref.dv.assign(v.size(), 0.0f);
    p.dout = f32(dout, {nb, rows, nh, D});
    p.dq = f32(ref.dq, {nb, rows, nh, D});
    p.dk = f32(ref.dk, {nb, Sk, nhk, D});
    p.dv = f32(ref.dv, {nb, Sk, nhk, D});
    flashattn::backward(p);
  }

  NaiveProblem np;
  np.batches = nb;
  np.rows = rows;
  np.keys = Sk;
  np.heads = nh;
  np.heads_k = nhk;
  np.dim = D;
  np.q = q.data();
  np.k = k.data();
  np.v = v.data();
  np.dout = dout.empty() ? nullptr : dout.data();
  np.dtype = c.dtype;
  np.scale = float(1.0 / std::sqrt(double(D)));  // the library's default softmax scale
  np.softcap = c.softcap;
  np.window_left = c.window_left;
  np.window_right = c.causal ? 0 : c.window_right;
  np.dropout = {c.dropout, c.dropout_seed, c.dropout_offset};
  np.row_offset = plan_.row_begin;
  np.call_heads = c.heads;
  NaiveResult nr = naive_attention(np, c.has_backward());

  reference_ = std::move(ref);
  naive_ = Expected{std::move(nr.out), std::move(nr.lse), std::move(nr.dq), std::move(nr.dk), std::move(nr.dv)};
}

CheckResult Checker::check(const RunOutputs& got) {
  CheckResult r;
  if (!plan_.skip_reason.empty()) {
    r.verdict = CheckResult::Verdict::skipped;
    r.summary = "skipped: " + plan_.skip_reason;
    return r;
  }
  prepare();
  const BenchConfig& c = cfg_;
  const int64_t rows = c.seqlen_q - plan_.row_begin;
  const Window qw{c.seqlen_q, c.heads, c.head_dim, plan_.batches, plan_.row_begin, rows, plan_.heads};
  const Window kw{c.seqlen_k, c.heads_k, c.head_dim, plan_.batches, 0, c.seqlen_k, plan_.heads_k};
  auto q_index = [&](int64_t k) { return qw.full_index(k); };
  auto k_index = [&](int64_t k) { return kw.full_index(k); };
  auto lse_index = [&](int64_t k) { return lse_full_index(qw, k); };
  const Expected& ref = *reference_;
  const Expected& naive = *naive_;

  std::vector<std::string> failures;
  auto add = [&](std::string failure) {
    if (!failure.empty()) failures.push_back(std::move(failure));
  };
  if (c.mode != Mode::bwd) {
    add(compare("out", got.out, q_index, ref.out, naive.out, c.dtype));
    add(compare("lse", got.lse, lse_index, ref.lse, naive.lse, DType::f32));
  }
  if (c.has_backward()) {
    add(compare("dq", got.dq, q_index, ref.dq, naive.dq, c.dtype));
    if (plan_.kv_grads) {
      add(compare("dk", got.dk, k_index, ref.dk, naive.dk, c.dtype));
      add(compare("dv", got.dv, k_index, ref.dv, naive.dv, c.dtype));
    }
  }
  r.verdict = failures.empty() ? CheckResult::Verdict::passed : CheckResult::Verdict::failed;
  r.summary = failures.empty() ? "passed" : "FAILED";
  if (!plan_.label.empty()) r.summary += " (" + plan_.label + ")";
  r.detail = join(failures, "; ");
  return r;
}

}  // namespace fabench
