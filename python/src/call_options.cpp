#include "call_options.h"

#include <string>

#include "flashattn/error.h"

namespace flashattn::python {

AttentionOptions make_options(const char* function, std::optional<float> softmax_scale, bool causal, int window_left,
                              int window_right, const InArray& alibi_slopes, float softcap,
                              const std::string& backend) {
  AttentionOptions o;
  o.softmax_scale = softmax_scale;
  o.causal = causal;
  o.window_left = window_left;
  o.window_right = window_right;
  o.alibi_slopes = to_tensor(alibi_slopes, function, "alibi_slopes");
  o.softcap = softcap;
  o.backend = backend;
  return o;
}

uintptr_t resolve_stream(std::optional<uintptr_t> stream, const InArray& q, const Tensor& q_view) {
  if (stream) return *stream;
  return q.exchange != nullptr ? exchange_current_stream(q.exchange, q_view.device) : 0;
}

nb::object attention_outputs(const char* function, const OutArray& out, const OutArray& softmax_lse, const InArray& q,
                             const Tensor& q_view, bool varlen, Tensor& out_view, Tensor& lse_view) {
  if (out.present()) {
    out_view = to_tensor(out, function, "out");
    lse_view = to_tensor(softmax_lse, function, "softmax_lse");
    return nb::none();
  }
  if (q.exchange == nullptr)
    throw Error(Status::invalid_argument,
                std::string(function) +
                    ": out: expected an array, got None (outputs are allocated only for arrays of a framework that "
                    "publishes DLPack's C exchange API, such as torch >= 2.10)");
  const Tensor& t = q_view;
  const int64_t lse_shape[3] = {varlen ? t.shape[1] : t.shape[0], varlen ? t.shape[0] : t.shape[2], t.shape[1]};
  nb::object o = exchange_empty(q.exchange, t, t.dtype, t.ndim, t.shape, "out", out_view);
  nb::object lse = exchange_empty(q.exchange, t, DType::f32, varlen ? 2 : 3, lse_shape, "softmax_lse", lse_view);
  return nb::make_tuple(o, lse);
}

}  // namespace flashattn::python
