#include "sysinfo.h"

#include <chrono>
#include <ctime>
#include <fstream>

#ifndef FLASHATTN_BENCH_GIT_COMMIT
#define FLASHATTN_BENCH_GIT_COMMIT "unknown"
#endif

namespace fabench {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

std::string utc_date() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string git_commit() { return FLASHATTN_BENCH_GIT_COMMIT; }

}  // namespace fabench
