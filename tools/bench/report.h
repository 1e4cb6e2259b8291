#pragma once

// Results of a run: one Row per backend per config, printed as a table and written as JSON records.

#include <iosfwd>
#include <string>
#include <vector>

#include "check.h"
#include "config.h"
#include "flashattn/tensor.h"

namespace fabench {

struct Row {
  enum class Status { measured, unsupported, error };

  std::string impl;
  flashattn::DeviceType device = flashattn::DeviceType::cpu;
  std::string device_name;  // model of the CPU or GPU it ran on
  Status status = Status::error;
  std::string note;   // the backend's reason (unsupported) or the exception's message (error)
  CheckResult check;  // summary "-" with --no-check
  int warmup = 0, iters = 0;
  double median_ms = 0.0;
  double speedup = 0.0;  // vs the device's baseline (set by compute_speedups); 0: none
};

struct ConfigResult {
  BenchConfig config;
  std::vector<Row> rows;
};

// Speedup of every measured row over its device's baseline: cuda_naive on CUDA, cpu_reference on the CPU,
// or the device's first measured row when the baseline did not run.
void compute_speedups(ConfigResult& result);

struct RunInfo {
  std::string date, version, commit, command_line;
  std::vector<std::string> devices;  // one line per device timed
};

void print_header(std::ostream& os, const RunInfo& info);
void print_table(std::ostream& os, const ConfigResult& result);

// Writes every row of every config as a JSON array of flat records (see docs/benchmarking.md).
void write_json(const std::string& path, const RunInfo& info, const std::vector<ConfigResult>& results);

}  // namespace fabench
