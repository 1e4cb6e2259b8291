#pragma once

// Command line of flashattn-bench. Every flag is documented in usage() and docs/benchmarking.md.

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.h"

namespace fabench {

enum class DeviceChoice { cpu, cuda, all };

struct Options {
  BenchConfig config;  // the single config, or the template of the sweep
  bool sweep = false;
  std::vector<int64_t> sweep_dims{64, 128};
  std::vector<int64_t> sweep_seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<std::string> impls;      // empty: every backend
  std::optional<int> warmup, iters;    // unset: the per-device defaults of timing.h
  std::optional<DeviceChoice> device;  // unset: decided in main from what the machine has
  std::string json_path;
  bool check = true;
  int threads = 0;        // 0: OpenMP's default
  bool cpu_time = false;  // time CPU backends in process CPU time per thread (timer_cpu.h)
  std::string cpu_isa;    // cpu_flash's instruction-set build (flashattn::set_cpu_isa); empty: automatic
  bool list = false, version = false, help = false;
  std::string command_line;  // argv joined, for the JSON records
};

// A malformed command line: the message names the flag, what it expects and what it got.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Options parse_args(int argc, char** argv);
std::string usage();

}  // namespace fabench
