// The public entry points: validate, pick a backend, run.

#include <string>

#include "api/backend.h"
#include "api/validate.h"
#include "flashattn/api.h"

namespace flashattn {

namespace detail {
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
  return Direction<Problem>::supports(b, p);
}

template <typename Problem>
std::vector<BackendSupport> query(const Problem& p, const std::string& forced) {
  std::vector<BackendSupport> out;
  bool chosen = false;
  for (const Backend& b : registry()) {
    BackendSupport s;
    s.name = b.name;
    s.device = b.device;
    if (b.variant) s.variant = b.variant();
    s.reason = support_reason(b, p);
    s.supported = s.reason.empty();
    if (s.supported && !chosen && (forced.empty() || forced == b.name)) s.chosen = chosen = true;
    out.push_back(std::move(s));
  }
  return out;
}

template <typename Problem>
void dispatch(const Problem& p, const std::string& forced, Stream stream) {
  const char* verb = Direction<Problem>::verb;
  if (!forced.empty()) {
    for (const Backend& b : registry()) {
      if (forced != b.name) continue;
      std::string why = support_reason(b, p);
      if (!why.empty())
        throw Error(Status::unsupported, std::string("flashattn::") + verb + ": backend '" + forced +
                                             "' does not support this call: " + why);
      Direction<Problem>::run(b, p, stream);
      return;
    }
    std::string names;
    for (const Backend& b : registry()) names += std::string(names.empty() ? "" : ", ") + b.name;
    throw Error(Status::invalid_argument, std::string("flashattn::") + verb + ": options.backend: expected one of {" +
                                              names + "}, got '" + forced + "'");
  }
  std::string reasons;
  for (const Backend& b : registry()) {
    std::string why = support_reason(b, p);
    if (why.empty()) {
      Direction<Problem>::run(b, p, stream);
      return;
    }
    reasons += std::string("\n  ") + b.name + ": " + why;
  }
  throw Error(Status::unsupported, std::string("flashattn::") + verb + ": no backend supports this call:" + reasons);
}

}  // namespace
}  // namespace detail

void forward(const FwdParams& params, Stream stream) {
  detail::dispatch(detail::make_fwd_problem(params), params.options.backend, stream);
}

void backward(const BwdParams& params, Stream stream) {
  detail::dispatch(detail::make_bwd_problem(params), params.options.backend, stream);
}

void forward_kvcache(const KVCacheParams& params, Stream stream) {
  detail::dispatch(detail::make_kvcache_problem(params), params.options.backend, stream);
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
