#include "timer_cpu.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "sysinfo.h"

namespace fabench {

namespace {

double process_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
}

}  // namespace

std::vector<double> CpuTimer::time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) run(nullptr);
  std::vector<double> ms;
  ms.reserve(size_t(iters));
  for (int i = 0; i < iters && process_cpu_; ++i) {
    const double start = process_cpu_ms();
    run(nullptr);
    ms.push_back((process_cpu_ms() - start) / omp_get_max_threads());
  }
  for (int i = 0; i < iters && !process_cpu_; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run(nullptr);
    const auto stop = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return ms;
}

std::string CpuTimer::device_name() const { return cpu_model(); }

std::string CpuTimer::describe() const {
  return cpu_model() + " (" + std::to_string(omp_get_max_threads()) + " OpenMP threads; " +
         (process_cpu_ ? "process CPU time / threads)" : "wall clock)");
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  const double lower = *std::max_element(samples.begin(), samples.begin() + mid);
  return 0.5 * (lower + upper);
}

}  // namespace fabench
