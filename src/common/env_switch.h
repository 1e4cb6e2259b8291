#pragma once

// Benchmarking switches: setting an environment variable to "0" turns a code path off, so that one build
// can be measured both ways in interleaved processes (bench/NOTES.md). Callers read each switch once per
// process (a function-local static).

#include <cstdlib>
#include <string_view>

namespace flashattn::detail {

inline bool env_switch_off(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string_view(v) == "0";
}

}  // namespace flashattn::detail
