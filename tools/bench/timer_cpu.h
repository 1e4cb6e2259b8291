#pragma once

// Timing of CPU backends, one run at a time: wall clock (std::chrono::steady_clock), or with
// process_cpu the process's CPU time divided by the OpenMP thread count, i.e. the time each core was
// busy, which time slicing on a shared machine does not inflate (it does include OpenMP's spin waits).

#include "timer.h"

namespace fabench {

class CpuTimer final : public Timer {
 public:
  explicit CpuTimer(bool process_cpu = false) : process_cpu_(process_cpu) {}
  flashattn::Stream stream() const override { return nullptr; }
  std::vector<double> time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) override;
  std::string device_name() const override;
  std::string describe() const override;  // model, OpenMP thread count and clock

 private:
  bool process_cpu_;
};

}  // namespace fabench
