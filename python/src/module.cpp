// flashattn._C: the thin native layer under the Python package. Validation and semantics live in the
// C++ library; this module only turns DLPack arrays into flashattn::Tensor views and calls it.

#include "bindings.h"

NB_MODULE(_C, m) {
  m.doc() = "Native bindings of flashattn (DLPack arrays in, the C++ library underneath).";
  flashattn::python::bind_errors(m);
  flashattn::python::bind_info(m);
  flashattn::python::bind_attention(m);
  flashattn::python::bind_kvcache(m);
  flashattn::python::bind_bf16_view(m);
  flashattn::python::bind_dist(m);
}
