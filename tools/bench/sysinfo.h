#pragma once

// Where and when a benchmark ran, for the header line and every JSON record.

#include <string>

namespace fabench {

std::string cpu_model();   // "model name" of /proc/cpuinfo, or "unknown CPU"
std::string utc_date();    // ISO 8601, e.g. "2026-12-02T10:11:12Z"
std::string git_commit();  // `git rev-parse --short HEAD` when CMake configured the bench, or "unknown"

}  // namespace fabench
