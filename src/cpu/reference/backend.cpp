#include "api/backends.h"
#include "cpu/reference/reference.h"

namespace flashattn::detail {

namespace {
std::string always(const FwdProblem&) { return {}; }
std::string always_bwd(const BwdProblem&) { return {}; }
std::string always_kv(const KVCacheProblem&) { return {}; }
}  // namespace

const Backend& cpu_reference_backend() {
  static const Backend b{"cpu_reference",
                         DeviceType::cpu,
                         always,
                         reference::forward,
                         always_bwd,
                         reference::backward,
                         always_kv,
                         reference::forward_kvcache,
                         /*any_head_dim=*/true,
                         /*paged_varlen_fwd=*/true};
  return b;
}

}  // namespace flashattn::detail
