#include "api/validate_common.h"

#include <cmath>
#include <string>

namespace flashattn::detail {

void check_head_dim(const ArgChecker& c, const char* name, int64_t head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    c.fail(name, "head_dim (last dim) in [1, 256]", std::to_string(head_dim));
}

void check_heads(const ArgChecker& c, int64_t heads, int64_t heads_k, const char* k_name) {
  // No heads at all (heads = heads_k = 0) is an empty call, like an empty batch: every tensor has no element
  // (the dispatcher runs no backend for it). K/V heads without query heads would leave gradients and caches
  // that no query reads: refused.
  if (heads == 0) {
    if (heads_k != 0) c.fail(k_name, "heads_k = 0 when q has no heads", "heads_k = " + std::to_string(heads_k));
    return;
  }
  if (heads_k <= 0 || heads % heads_k != 0)
    c.fail(k_name, "heads_k dividing the query heads (" + std::to_string(heads) + ") for GQA/MQA",
           "heads_k = " + std::to_string(heads_k));
}

ScoreParams make_score_params(const ArgChecker& c, const AttentionOptions& o, int64_t batch, int64_t heads,
                              int64_t head_dim, Device device) {
  ScoreParams s;
  if (o.softmax_scale.has_value()) {
    if (!std::isfinite(*o.softmax_scale)) c.fail("softmax_scale", "a finite value", std::to_string(*o.softmax_scale));
    s.softmax_scale = *o.softmax_scale;
  } else {
    s.softmax_scale = float(1.0 / std::sqrt(double(head_dim)));
  }
  if (!(o.softcap >= 0.0f) || !std::isfinite(o.softcap))
    c.fail("softcap", "a finite value >= 0 (0 disables it)", std::to_string(o.softcap));
  s.softcap = o.softcap;
  if (o.window_left < -1) c.fail("window_size[0] (left)", "-1 (unbounded) or >= 0", std::to_string(o.window_left));
  if (o.window_right < -1) c.fail("window_size[1] (right)", "-1 (unbounded) or >= 0", std::to_string(o.window_right));
  s.causal = o.causal;
  s.window_left = o.window_left;
  s.window_right = o.causal ? 0 : o.window_right;
  if (o.alibi_slopes.present()) {
    const Tensor& a = o.alibi_slopes;
    c.dtype(a, "alibi_slopes", DType::f32);
    c.device(a, "alibi_slopes", device, "q");
    if (a.ndim == 1) {
      c.tensor(a, "alibi_slopes", 1, "(heads)");
      c.shape(a, "alibi_slopes", {heads}, "(heads)");
      s.alibi_batch_stride = 0;
    } else {
      c.tensor(a, "alibi_slopes", 2, "(batch, heads)");
      c.shape(a, "alibi_slopes", {batch, heads}, "(batch, heads)");
      s.alibi_batch_stride = a.stride[0];
    }
    s.alibi_slopes = static_cast<const float*>(a.data);
  }
  return s;
}

int64_t view_stride(const Tensor& t, int dim) { return t.numel() == 0 ? 0 : t.stride[dim]; }

RowsView rows_view(const Tensor& t) {
  RowsView r;
  r.ptr = t.data;
  if (t.ndim == 4) {
    r.batch_stride = view_stride(t, 0);
    r.row_stride = view_stride(t, 1);
    r.head_stride = view_stride(t, 2);
  } else {
    r.batch_stride = 0;
    r.row_stride = view_stride(t, 0);
    r.head_stride = view_stride(t, 1);
  }
  return r;
}

DescaleView descale_view(const ArgChecker& c, const Tensor& t, const char* name, int64_t batch, int64_t heads_k,
                         Device device, bool allowed, const char* allowed_with) {
  DescaleView v;
  if (!t.present()) return v;
  if (!allowed) c.fail(name, std::string("none (descale factors apply to ") + allowed_with + " only)", "a tensor");
  c.tensor(t, name, 2, "(batch, heads_k)");
  c.shape(t, name, {batch, heads_k}, "(batch, heads_k)");
  c.dtype(t, name, DType::f32);
  c.device(t, name, device, "q");
  v.ptr = static_cast<const float*>(t.data);
  v.batch_stride = view_stride(t, 0);
  v.head_stride = view_stride(t, 1);
  return v;
}

}  // namespace flashattn::detail
