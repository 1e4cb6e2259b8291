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
  // The code path the backend runs in this process (cpu_flash: its instruction-set build); null: one path.
  std::string (*variant)() = nullptr;
};

// Every backend compiled in, in preference order: dispatch takes the first that supports a call.
const std::vector<Backend>& registry();

}  // namespace flashattn::detail
