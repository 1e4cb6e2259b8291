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

nb::object allocate_output(const InArray& like, const Tensor& like_view, DType dtype, int ndim, const int64_t* shape,
                           const char* function, const char* name, Tensor& view) {
  if (like.exchange == nullptr)
    throw Error(Status::invalid_argument,
                std::string(function) + ": " + name +
                    ": expected an array, got None (outputs are allocated only for arrays of a framework that "
                    "publishes DLPack's C exchange API, such as torch >= 2.10)");
  return exchange_empty(like.exchange, like_view, dtype, ndim, shape, name, view);
}

}  // namespace flashattn::python
