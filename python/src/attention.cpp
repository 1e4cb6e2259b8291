// fwd and bwd: flashattn::forward / flashattn::backward on DLPack arrays, plus query_fwd / query_bwd
// that take the same arguments and report which backend would run the call.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "call_options.h"

namespace flashattn::python {

namespace {

using namespace nb::literals;

constexpr const char* kFwd = "flashattn::forward";
constexpr const char* kBwd = "flashattn::backward";

template <typename Action>
nb::object fwd_entry(InArray q, InArray k, InArray v, OutArray out, OutArray softmax_lse, InArray cu_seqlens_q,
                     InArray cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                     std::optional<float> softmax_scale, bool causal, int window_left, int window_right,
                     InArray alibi_slopes, float softcap, float dropout_p, uint64_t seed, uint64_t offset,
                     const std::string& backend, std::optional<uintptr_t> stream, InArray block_table,
                     InArray seqused_k, InArray q_descale, InArray k_descale, InArray v_descale) {
  FwdParams p;
  p.q = to_tensor(q, kFwd, "q");
  p.k = to_tensor(k, kFwd, "k");
  p.v = to_tensor(v, kFwd, "v");
  nb::object outputs = attention_outputs(kFwd, out, softmax_lse, q, p.q, cu_seqlens_q.present(), p.out, p.softmax_lse);
  p.cu_seqlens_q = to_tensor(cu_seqlens_q, kFwd, "cu_seqlens_q");
  p.cu_seqlens_k = to_tensor(cu_seqlens_k, kFwd, "cu_seqlens_k");
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.options = make_options(kFwd, softmax_scale, causal, window_left, window_right, alibi_slopes, softcap, backend);
  p.dropout_p = dropout_p;
  p.seed = seed;
  p.offset = offset;
  p.block_table = to_tensor(block_table, kFwd, "block_table");
  p.seqused_k = to_tensor(seqused_k, kFwd, "seqused_k");
  p.q_descale = to_tensor(q_descale, kFwd, "q_descale");
  p.k_descale = to_tensor(k_descale, kFwd, "k_descale");
  p.v_descale = to_tensor(v_descale, kFwd, "v_descale");
  return finish<Action>(p, resolve_stream(stream, q, p.q), std::move(outputs));
}

template <typename Action>
nb::object bwd_entry(InArray dout, InArray q, InArray k, InArray v, InArray out, InArray softmax_lse, OutArray dq,
                     OutArray dk, OutArray dv, InArray cu_seqlens_q, InArray cu_seqlens_k, int64_t max_seqlen_q,
                     int64_t max_seqlen_k, std::optional<float> softmax_scale, bool causal, int window_left,
                     int window_right, InArray alibi_slopes, float softcap, float dropout_p, uint64_t seed,
                     uint64_t offset, bool deterministic, const std::string& backend, std::optional<uintptr_t> stream) {
  BwdParams p;
  p.dout = to_tensor(dout, kBwd, "dout");
  p.q = to_tensor(q, kBwd, "q");
  p.k = to_tensor(k, kBwd, "k");
  p.v = to_tensor(v, kBwd, "v");
  p.out = to_tensor(out, kBwd, "out");
  p.softmax_lse = to_tensor(softmax_lse, kBwd, "softmax_lse");
  p.dq = to_tensor(dq, kBwd, "dq");
  p.dk = to_tensor(dk, kBwd, "dk");
  p.dv = to_tensor(dv, kBwd, "dv");
  p.cu_seqlens_q = to_tensor(cu_seqlens_q, kBwd, "cu_seqlens_q");
  p.cu_seqlens_k = to_tensor(cu_seqlens_k, kBwd, "cu_seqlens_k");
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.options = make_options(kBwd, softmax_scale, causal, window_left, window_right, alibi_slopes, softcap, backend);
  p.dropout_p = dropout_p;
  p.seed = seed;
  p.offset = offset;
  p.deterministic = deterministic;
  return finish<Action>(p, resolve_stream(stream, q, p.q), nb::none());
}

// The argument list of fwd and query_fwd, written once.
template <typename Func>
void def_fwd(nb::module_& m, const char* name, Func f, const char* doc) {
  m.def(name, f, "q"_a, "k"_a, "v"_a, "out"_a.none(), "softmax_lse"_a.none() = nb::none(),
        "cu_seqlens_q"_a.none() = nb::none(), "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0,
        "max_seqlen_k"_a = 0, "softmax_scale"_a.none() = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "alibi_slopes"_a.none() = nb::none(), "softcap"_a = 0.0f, "dropout_p"_a = 0.0f,
        "seed"_a = 0, "offset"_a = 0, "backend"_a = "", "stream"_a.none() = nb::none(),
        "block_table"_a.none() = nb::none(), "seqused_k"_a.none() = nb::none(), "q_descale"_a.none() = nb::none(),
        "k_descale"_a.none() = nb::none(), "v_descale"_a.none() = nb::none(), doc);
}

template <typename Func>
void def_bwd(nb::module_& m, const char* name, Func f, const char* doc) {
  m.def(name, f, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "softmax_lse"_a, "dq"_a, "dk"_a, "dv"_a,
        "cu_seqlens_q"_a.none() = nb::none(), "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0,
        "max_seqlen_k"_a = 0, "softmax_scale"_a.none() = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "alibi_slopes"_a.none() = nb::none(), "softcap"_a = 0.0f, "dropout_p"_a = 0.0f,
        "seed"_a = 0, "offset"_a = 0, "deterministic"_a = false, "backend"_a = "", "stream"_a.none() = nb::none(), doc);
}

}  // namespace

void bind_attention(nb::module_& m) {
  def_fwd(m, "fwd", &fwd_entry<RunCall>,
          "flashattn::forward: writes out (and softmax_lse when given) on `stream` (a cudaStream_t as int, 0 = "
          "default; None = the current stream of q's framework where it names one, else 0). Dense q (B, Sq, H, "
          "D), k/v (B, Sk, Hk, D); varlen (total, H, D) with cu_seqlens, "
          "k/v paged (num_blocks, page_size, Hk, D) with block_table, and seqused_k; FP8: q, k, v float8_e4m3fn "
          "with optional fp32 (B, Hk) q/k/v_descale, out bf16. out=None allocates out and "
          "softmax_lse with q's framework (DLPack's exchange API: torch) and returns (out, softmax_lse).");
  def_fwd(m, "query_fwd", &fwd_entry<QueryCall>,
          "Validates fwd's arguments and returns each backend's answer (dicts); nothing is written, stream is unused.");
  def_bwd(m, "bwd", &bwd_entry<RunCall>,
          "flashattn::backward: writes dq, dk, dv from dout, q, k, v, out and softmax_lse on `stream`.");
  def_bwd(m, "query_bwd", &bwd_entry<QueryCall>,
          "Validates bwd's arguments and returns each backend's answer (dicts); nothing is written, stream is unused.");
}

}  // namespace flashattn::python
