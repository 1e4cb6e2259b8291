#pragma once

// The backend interface. A backend is a table of plain functions; each `supports_*` returns an empty
// string when the backend can run the call, else a short reason ("head_dim 72 not compiled", ...).
// A null pointer means the backend does not implement that direction at all.

#include <string>
#include <vector>

#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail {

struct Backend {
  const char* name = "";
  DeviceType device = DeviceType::cpu;
  std::string (*supports_fwd)(const FwdProblem&) = nullptr;
  void (*run_fwd)(const FwdProblem&, Stream) = nullptr;
  std::string (*supports_bwd)(const BwdProblem&) = nullptr;
  void (*run_bwd)(const BwdProblem&, Stream) = nullptr;
  std::string (*supports_kvcache)(const KVCacheProblem&) = nullptr;
  void (*run_kvcache)(const KVCacheProblem&, Stream) = nullptr;
  // Capabilities the dispatcher checks before asking supports_* (so a backend that predates a feature
  // declines it with a reason instead of misreading the problem):
  // runs head dims that are not multiples of 8 itself; otherwise the dispatcher pads them (head_dim_pad.h)
  bool any_head_dim = false;
  // reads paged K/V (FwdProblem::paged) and seqused_k in forward
  bool paged_varlen_fwd = false;
  // Non-null for a backend the dispatcher picks on its own only once the user opts in: it returns why
  // not (empty when opted in). options.backend naming the backend runs it regardless. For a new kernel
  // generation that has not yet been verified on its hardware.
  std::string (*default_decline)() = nullptr;
  // The code path the backend runs in this process (cpu_flash: its instruction-set build); null: one path.
  std::string (*variant)() = nullptr;
  // Non-null for a backend that leaves some forward calls to the next backend when the call does not name
  // it, because that one measured faster there: returns why (empty: no preference). Named, it runs them.
  std::string (*defer_fwd)(const FwdProblem&) = nullptr;
  // The same for backward calls. Named, the backend runs them.
  std::string (*defer_bwd)(const BwdProblem&) = nullptr;
};

// Why `b` cannot run `p` whatever its supports_* says (a feature its table does not declare), or "".
std::string capability_reason(const Backend& b, const FwdProblem& p);
std::string capability_reason(const Backend& b, const KVCacheProblem& p);

// Every backend compiled in, in preference order: dispatch takes the first that supports a call.
const std::vector<Backend>& registry();

// For a backend that runs a forward call by turning it into another one (cuda_fp8: FP8 inputs into bf16
// ones): runs `p` where the dispatcher would run it had the user made that call (no backend named, head
// dims padded as for any call), and says why no backend of its device would ("" when one would).
void dispatch_forward(const FwdProblem& p, Stream stream);
std::string forward_unsupported_reason(const FwdProblem& p);

}  // namespace flashattn::detail
