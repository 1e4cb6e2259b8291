#include "call_options.h"

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

}  // namespace flashattn::python
