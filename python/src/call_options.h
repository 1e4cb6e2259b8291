#pragma once

// Pieces shared by the attention entry points: the options every call takes, the stream handle, and
// how a fully built params struct is either run (GIL released) or asked which backend would run it.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "arrays.h"
#include "bindings.h"
#include "flashattn/api.h"

namespace flashattn::python {

AttentionOptions make_options(const char* function, std::optional<float> softmax_scale, bool causal, int window_left,
                              int window_right, const InArray& alibi_slopes, float softcap, const std::string& backend);

// The stream argument is the integer value of a cudaStream_t (torch: stream.cuda_stream); 0 is the
// default stream.
inline Stream to_stream(uintptr_t stream) { return reinterpret_cast<Stream>(stream); }

// The stream a call runs on: the caller's, or when None the current stream of the framework that `q` was
// read through (DLPack's exchange API: torch.cuda.current_stream() for torch), else 0.
uintptr_t resolve_stream(std::optional<uintptr_t> stream, const InArray& q, const Tensor& q_view);

// The call's out and softmax_lse as the caller passed them, or, when out is None, both allocated with the
// framework q was read through (torch.empty on q's device): out contiguous with q's shape and dtype,
// softmax_lse float32 (batch, heads, seqlen_q), or (heads, total_q) when `varlen`. Returns the allocated
// (out, softmax_lse), or None when the caller passed out. Throws invalid_argument naming `function` and
// out when that framework cannot allocate (q was not read through DLPack's exchange API).
nb::object attention_outputs(const char* function, const OutArray& out, const OutArray& softmax_lse, const InArray& q,
                             const Tensor& q_view, bool varlen, Tensor& out_view, Tensor& lse_view);

// Runs the call on `stream` with the GIL released: other Python threads go on while a CPU backend
// computes, and no Python object is touched below this point.
struct RunCall {
  template <typename Params>
  static void apply(const Params& params, uintptr_t stream) {
    nb::gil_scoped_release released;
    run(params, to_stream(stream));
  }

 private:
  static void run(const FwdParams& p, Stream s) { flashattn::forward(p, s); }
  static void run(const BwdParams& p, Stream s) { flashattn::backward(p, s); }
  static void run(const KVCacheParams& p, Stream s) { flashattn::forward_kvcache(p, s); }
};

// Validates the call and reports each backend's answer instead of running it (the stream is unused).
struct QueryCall {
  template <typename Params>
  static nb::list apply(const Params& params, uintptr_t) {
    return backend_support_list(flashattn::query_backends(params));
  }
};

// Runs or queries a fully built call. A run returns `outputs` (the arrays the entry allocated, or None); a
// query returns the backends' answers.
template <typename Action, typename Params>
nb::object finish(const Params& params, uintptr_t stream, nb::object outputs) {
  if constexpr (std::is_same_v<Action, QueryCall>) {
    return Action::apply(params, stream);
  } else {
    Action::apply(params, stream);
    return outputs;
  }
}

}  // namespace flashattn::python
