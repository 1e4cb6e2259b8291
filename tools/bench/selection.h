#pragma once

// Which backends run: --impl and --device against what this build and machine have; and --list.

#include <iosfwd>
#include <string>
#include <vector>

#include "args.h"
#include "flashattn/api.h"

namespace fabench {

struct Selection {
  std::vector<flashattn::BackendInfo> backends;  // in the library's dispatch order
  bool cpu = false, cuda = false;                // whether any selected backend runs there
  std::vector<std::string> notes;                // backends left out, and why
};

// Throws UsageError for an unknown --impl name, --device cuda without a usable GPU, or an empty selection.
Selection select_backends(const Options& o);

// For each backend of the build: whether it supports `cfg` (flashattn::query_backends on tensors of its
// device) and which one dispatch would choose.
void print_support(std::ostream& os, const BenchConfig& cfg);

}  // namespace fabench
