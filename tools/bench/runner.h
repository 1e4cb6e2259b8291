#pragma once

// Runs one config on each selected backend: asks whether the backend supports it, runs it once on
// poisoned outputs for the all-close check, then times it. Failures become rows, never aborts.

#include <memory>
#include <vector>

#include "call_tensors.h"
#include "check.h"
#include "config.h"
#include "flashattn/api.h"
#include "host_array.h"
#include "report.h"
#include "timer.h"

namespace fabench {

struct RunCounts {
  int warmup = 0, iters = 1;
};

struct RunSettings {
  bool check = true;
  RunCounts cpu, cuda;
};

class Runner {
 public:
  // `cuda_timer` may be null when no CUDA backend is selected. Timers are not owned.
  Runner(RunSettings settings, Timer* cpu_timer, Timer* cuda_timer);

  ConfigResult run(const BenchConfig& cfg, const HostInputs& inputs,
                   const std::vector<flashattn::BackendInfo>& backends);

 private:
  Row run_backend(const flashattn::BackendInfo& backend, const BenchConfig& cfg, const HostInputs& inputs,
                  Checker* checker);
  Timer& timer_for(flashattn::DeviceType device) const;

  RunSettings settings_;
  Timer* cpu_timer_;
  Timer* cuda_timer_;
  // Tensors of the current config, per device (index: DeviceType), made when a backend first needs them.
  std::unique_ptr<CallTensors> tensors_[2];
};

}  // namespace fabench
