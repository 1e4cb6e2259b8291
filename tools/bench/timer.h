#pragma once

// How runs are timed on a device: CpuTimer (timer_cpu.h) or CudaTimer (timer_cuda.h, CUDA builds only).

#include <functional>
#include <string>
#include <vector>

#include "flashattn/params.h"

namespace fabench {

class Timer {
 public:
  virtual ~Timer() = default;

  // The stream every run, copy and fill for this device is enqueued on (nullptr on the CPU).
  virtual flashattn::Stream stream() const = 0;
  // Runs `run(stream())` warmup times untimed, then iters times timed one by one; returns milliseconds.
  virtual std::vector<double> time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) = 0;
  // The device's model name, for the JSON records; and a line for the header with how it is timed.
  virtual std::string device_name() const = 0;
  virtual std::string describe() const = 0;
};

// The median (mean of the two middle values for an even count): robust to the odd slow run (page faults,
// another process, a clock change) that would drag a mean.
double median(std::vector<double> samples);

}  // namespace fabench
