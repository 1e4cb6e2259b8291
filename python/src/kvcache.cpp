// fwd_kvcache: flashattn::forward_kvcache on DLPack arrays (k_cache/v_cache are updated in place when
// k_new/v_new are given), plus query_fwd_kvcache with the same arguments.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <exception>

#include "call_options.h"

namespace flashattn::python {

namespace {

using namespace nb::literals;

constexpr const char* kKV = "flashattn::forward_kvcache";

template <typename Action>
nb::object kvcache_entry(InArray q, OutArray k_cache, OutArray v_cache, OutArray out, InArray k_new, InArray v_new,
                         OutArray softmax_lse, InArray cache_seqlens, int64_t cache_seqlens_scalar,
                         InArray cache_batch_idx, InArray cache_leftpad, InArray block_table, InArray rotary_cos,
                         InArray rotary_sin, bool rotary_interleaved, std::optional<float> softmax_scale, bool causal,
                         int window_left, int window_right, InArray alibi_slopes, float softcap, int num_splits,
                         const std::string& backend, std::optional<uintptr_t> stream, nb::object workspace_alloc,
                         bool check_index_values, InArray k_descale, InArray v_descale) {
  KVCacheParams p;
  p.q = to_tensor(q, kKV, "q");
  // workspace_alloc(bytes) -> an array on the call's device (torch.empty on the current stream): the
  // kernels' scratch memory from the framework's caching allocator. The array is kept until the call
  // has returned; the framework reclaims it in stream order after that. Without it, an array read through
  // DLPack's exchange API gets the same from its framework's allocator directly.
  nb::object workspace;
  ExchangeWorkspace exchange_workspace{q.exchange, p.q.device, nullptr};
  if (!workspace_alloc.is_none()) {
    p.workspace_allocator = [&](size_t bytes) -> void* {
      nb::gil_scoped_acquire gil;
      try {
        workspace = workspace_alloc(bytes);
        return reinterpret_cast<void*>(nb::cast<uintptr_t>(workspace.attr("data_ptr")()));
      } catch (const std::exception&) {  // a Python error or a result without an integer data_ptr()
        return nullptr;                  // the call then fails with Status::out_of_memory
      }
    };
  } else if (q.exchange != nullptr && p.q.device.type == DeviceType::cuda) {
    p.workspace_allocator = [&](size_t bytes) { return exchange_workspace.allocate(bytes); };
  }
  nb::object outputs = attention_outputs(kKV, out, softmax_lse, q, p.q, false, p.out, p.softmax_lse);
  p.k_cache = to_tensor(k_cache, kKV, "k_cache");
  p.v_cache = to_tensor(v_cache, kKV, "v_cache");
  p.k_new = to_tensor(k_new, kKV, "k");
  p.v_new = to_tensor(v_new, kKV, "v");
  p.cache_seqlens = to_tensor(cache_seqlens, kKV, "cache_seqlens");
  p.cache_seqlens_scalar = cache_seqlens_scalar;
  p.cache_batch_idx = to_tensor(cache_batch_idx, kKV, "cache_batch_idx");
  p.cache_leftpad = to_tensor(cache_leftpad, kKV, "cache_leftpad");
  p.block_table = to_tensor(block_table, kKV, "block_table");
  p.rotary_cos = to_tensor(rotary_cos, kKV, "rotary_cos");
  p.rotary_sin = to_tensor(rotary_sin, kKV, "rotary_sin");
  p.rotary_interleaved = rotary_interleaved;
  p.options = make_options(kKV, softmax_scale, causal, window_left, window_right, alibi_slopes, softcap, backend);
  p.options.check_index_values = check_index_values;
  p.num_splits = num_splits;
  p.k_descale = to_tensor(k_descale, kKV, "k_descale");
  p.v_descale = to_tensor(v_descale, kKV, "v_descale");
  return finish<Action>(p, resolve_stream(stream, q, p.q), std::move(outputs));
}

template <typename Func>
void def_kvcache(nb::module_& m, const char* name, Func f, const char* doc) {
  m.def(name, f, "q"_a, "k_cache"_a, "v_cache"_a, "out"_a.none(), "k_new"_a.none() = nb::none(),
        "v_new"_a.none() = nb::none(), "softmax_lse"_a.none() = nb::none(), "cache_seqlens"_a.none() = nb::none(),
        "cache_seqlens_scalar"_a = -1, "cache_batch_idx"_a.none() = nb::none(), "cache_leftpad"_a.none() = nb::none(),
        "block_table"_a.none() = nb::none(), "rotary_cos"_a.none() = nb::none(), "rotary_sin"_a.none() = nb::none(),
        "rotary_interleaved"_a = true, "softmax_scale"_a.none() = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "alibi_slopes"_a.none() = nb::none(), "softcap"_a = 0.0f, "num_splits"_a = 0,
        "backend"_a = "", "stream"_a.none() = nb::none(), "workspace_alloc"_a.none() = nb::none(),
        "check_index_values"_a = false, "k_descale"_a.none() = nb::none(), "v_descale"_a.none() = nb::none(), doc);
}

}  // namespace

void bind_kvcache(nb::module_& m) {
  def_kvcache(m, "fwd_kvcache", &kvcache_entry<RunCall>,
              "flashattn::forward_kvcache: appends k_new/v_new into the cache (in place), then attends; writes "
              "out (and softmax_lse when given) on `stream`. cache_seqlens is an int32 array or, when None, "
              "cache_seqlens_scalar for every sequence (-1: the whole cache). workspace_alloc, when given, is "
              "called with a byte count and returns a device array (its data_ptr is used) for the kernels' "
              "scratch memory, valid for the work on `stream`. out=None allocates out and softmax_lse with q's "
              "framework (DLPack's exchange API: torch) and returns (out, softmax_lse); stream=None runs on that "
              "framework's current stream (else 0). An FP8 cache: k_cache and v_cache float8_e4m3fn with optional "
              "fp32 (B, Hk) k_descale / v_descale (stored value x factor is the real one; appended rows are "
              "stored over it).");
  def_kvcache(m, "query_fwd_kvcache", &kvcache_entry<QueryCall>,
              "Validates fwd_kvcache's arguments and returns each backend's answer (dicts); nothing is written, stream "
              "is unused.");
}

}  // namespace flashattn::python
