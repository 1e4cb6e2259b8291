// The public entry points: validate, pick a backend, run.

#include <string>

#include "api/backend.h"
#include "api/head_dim_pad.h"
#include "api/index_check.h"
#include "api/validate.h"
#include "flashattn/api.h"

namespace flashattn {

namespace detail {

std::string capability_reason(const Backend& b, const FwdProblem& p) {
  if (!b.paged_varlen_fwd && p.paged_kv())
    return "paged K/V (block_table) in a varlen forward not implemented (cuda_sm80 and the CPU backends run it)";
  if (!b.paged_varlen_fwd && p.seqused_k)
    return "seqused_k in a varlen forward not implemented (cuda_sm80 and the CPU backends run it)";
  return {};
}
std::string capability_reason(const Backend&, const KVCacheProblem&) { return {}; }

namespace {

// Per direction: how to ask a backend whether it supports a problem, and how to run it.
template <typename Problem>
struct Direction;

template <>
struct Direction<FwdProblem> {
  static constexpr const char* verb = "forward";
  static std::string supports(const Backend& b, const FwdProblem& p) {
    return b.supports_fwd ? b.supports_fwd(p) : "no forward";
  }
  static void run(const Backend& b, const FwdProblem& p, Stream s) { b.run_fwd(p, s); }
};

template <>
struct Direction<BwdProblem> {
  static constexpr const char* verb = "backward";
  static std::string supports(const Backend& b, const BwdProblem& p) {
    return b.supports_bwd ? b.supports_bwd(p) : "no backward";
  }
  static void run(const Backend& b, const BwdProblem& p, Stream s) { b.run_bwd(p, s); }
};

template <>
struct Direction<KVCacheProblem> {
  static constexpr const char* verb = "forward_kvcache";
  static std::string supports(const Backend& b, const KVCacheProblem& p) {
    return b.supports_kvcache ? b.supports_kvcache(p) : "no forward_kvcache";
  }
  static void run(const Backend& b, const KVCacheProblem& p, Stream s) { b.run_kvcache(p, s); }
};

template <typename Problem>
std::string support_reason(const Backend& b, const Problem& p) {
  if (b.device != p.device.type)
    return std::string("runs on ") + (b.device == DeviceType::cpu ? "cpu" : "cuda") + " tensors, the call's are on " +
           device_name(p.device);
  if (std::string why = capability_reason(b, p); !why.empty()) return why;
  // A backend that pads is asked about the padded call it will run (unbound: nothing allocated yet).
  if (needs_head_dim_pad(b, p.head_dim)) {
    if (std::string why = pad_unsupported_reason(p); !why.empty())
      return "head_dim " + std::to_string(p.head_dim) + ": " + why;
    return Direction<Problem>::supports(b, pad_call(p).problem);
  }
  return Direction<Problem>::supports(b, p);
}

std::unique_ptr<PadCopier> pad_copier(const FwdProblem& p, Stream stream) {
  return device_pad_copier(p.device, stream);
}
std::unique_ptr<PadCopier> pad_copier(const KVCacheProblem& p, Stream stream) {
  return device_pad_copier(p.device, stream, p.workspace_allocator, p.workspace_context);
}

// Runs `p` on `b`. A call without heads has no element to read or write, and kernels cannot launch the
// empty grids it would give, so no backend is asked to run it (the choice and its errors stay the same).
template <typename Problem>
void run_on(const Backend& b, const Problem& p, Stream stream) {
  if (p.heads == 0) return;
  if (!needs_head_dim_pad(b, p.head_dim)) return Direction<Problem>::run(b, p, stream);
  std::unique_ptr<PadCopier> copier = pad_copier(p, stream);
  run_padded(p, *copier, [&](const Problem& padded) { Direction<Problem>::run(b, padded, stream); });
}

// A backend's preference to leave a call it supports to the next one (Backend::defer_fwd, defer_bwd).
std::string defer_reason(const Backend& b, const FwdProblem& p) { return b.defer_fwd ? b.defer_fwd(p) : ""; }
std::string defer_reason(const Backend& b, const BwdProblem& p) { return b.defer_bwd ? b.defer_bwd(p) : ""; }
template <typename Problem>
std::string defer_reason(const Backend&, const Problem&) {
  return {};
}

// support_reason, for a call that does not name the backend: an opt-in backend also gives its reason, and a
// backend that defers the call to a faster one says so.
template <typename Problem>
std::string default_reason(const Backend& b, const Problem& p) {
  std::string why = support_reason(b, p);
  if (why.empty() && b.default_decline != nullptr) why = b.default_decline();
  if (why.empty()) why = defer_reason(b, p);
  return why;
}

// The choice rule, written once for dispatch and query_backends: among the backends a call allows (every
// registered one, or only the one options.backend names), the first in registry order that supports it.
bool allowed(const Backend& b, const std::string& forced) { return forced.empty() || forced == b.name; }

// Why `b` declines `p` in a call that names `forced` (or none): a named backend is judged on the call alone,
// an unnamed one also by its opt-in (default_decline).
template <typename Problem>
std::string call_reason(const Backend& b, const Problem& p, const std::string& forced) {
  return forced == b.name ? support_reason(b, p) : default_reason(b, p);
}

template <typename Problem>
std::vector<BackendSupport> query(const Problem& p, const std::string& forced) {
  std::vector<BackendSupport> out;
  bool chosen = false;
  for (const Backend& b : registry()) {
    BackendSupport s;
    s.name = b.name;
    s.device = b.device;
    s.reason = call_reason(b, p, forced);
    if (b.variant) s.variant = b.variant();
    s.supported = s.reason.empty();
    if (s.supported && !chosen && allowed(b, forced)) s.chosen = chosen = true;
    out.push_back(std::move(s));
  }
  return out;
}

// Runs the choice; evaluates the backends in order only up to it.
template <typename Problem>
void dispatch(const Problem& p, const std::string& forced, Stream stream) {
  const char* verb = Direction<Problem>::verb;
  std::string reasons;
  bool named = forced.empty();
  for (const Backend& b : registry()) {
    if (!allowed(b, forced)) continue;
    named = true;
    std::string why = call_reason(b, p, forced);
    if (why.empty()) {
      run_on(b, p, stream);
      return;
    }
    if (!forced.empty())
      throw Error(Status::unsupported,
                  std::string("flashattn::") + verb + ": backend '" + forced + "' does not support this call: " + why);
    reasons += std::string("\n  ") + b.name + ": " + why;
  }
  if (!named) {
    std::string names;
    for (const Backend& b : registry()) names += std::string(names.empty() ? "" : ", ") + b.name;
    throw Error(Status::invalid_argument, std::string("flashattn::") + verb + ": options.backend: expected one of {" +
                                              names + "}, got '" + forced + "'");
  }
  throw Error(Status::unsupported, std::string("flashattn::") + verb + ": no backend supports this call:" + reasons);
}

}  // namespace

void dispatch_forward(const FwdProblem& p, Stream stream) { dispatch(p, std::string(), stream); }

std::string forward_unsupported_reason(const FwdProblem& p) {
  std::string reasons;
  for (const Backend& b : registry()) {
    if (b.device != p.device.type) continue;
    const std::string why = default_reason(b, p);
    if (why.empty()) return {};
    reasons += std::string(reasons.empty() ? "" : "; ") + b.name + ": " + why;
  }
  return reasons;
}

}  // namespace detail

void forward(const FwdParams& params, Stream stream) {
  const auto problem = detail::make_fwd_problem(params);
  detail::check_index_values_on_device(problem, params.options, stream, "flashattn::forward");
  detail::dispatch(problem, params.options.backend, stream);
}

void backward(const BwdParams& params, Stream stream) {
  const auto problem = detail::make_bwd_problem(params);
  detail::check_index_values_on_device(problem, params.options, stream, "flashattn::backward");
  detail::dispatch(problem, params.options.backend, stream);
}

void forward_kvcache(const KVCacheParams& params, Stream stream) {
  const auto problem = detail::make_kvcache_problem(params);
  detail::check_index_values_on_device(problem, params.options, stream, "flashattn::forward_kvcache");
  detail::dispatch(problem, params.options.backend, stream);
}

std::vector<BackendSupport> query_backends(const FwdParams& params) {
  return detail::query(detail::make_fwd_problem(params), params.options.backend);
}

std::vector<BackendSupport> query_backends(const BwdParams& params) {
  return detail::query(detail::make_bwd_problem(params), params.options.backend);
}

std::vector<BackendSupport> query_backends(const KVCacheParams& params) {
  return detail::query(detail::make_kvcache_problem(params), params.options.backend);
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const detail::Backend& b : detail::registry()) out.push_back({b.name, b.device});
  return out;
}

}  // namespace flashattn
