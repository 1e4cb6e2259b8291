#pragma once

// Wall-clock timing of CPU backends with std::chrono::steady_clock, one run at a time.

#include "timer.h"

namespace fabench {

class CpuTimer final : public Timer {
 public:
  flashattn::Stream stream() const override { return nullptr; }
  std::vector<double> time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) override;
  std::string device_name() const override;
  std::string describe() const override;  // model and OpenMP thread count
};

}  // namespace fabench
