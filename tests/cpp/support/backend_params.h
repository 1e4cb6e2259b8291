#pragma once

// Parameterisation of the per-backend tests: every registered backend except the reference, crossed
// with a case catalogue. CUDA cases skip (visibly) when no CUDA device is present; a case a backend
// declares unsupported skips with the backend's reason.

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "attention_case.h"

namespace fa_test {

using BackendCase = std::tuple<std::string, int>;  // backend name, index into a catalogue

std::vector<std::string> tested_backends();  // all but cpu_reference
std::string backend_case_name(const std::string& backend, const AttnConfig& cfg, int index);

// Skips the current test when `backend` cannot run here; returns the device to run on.
#define FA_SKIP_IF_DEVICE_MISSING(backend)                                                                 \
  do {                                                                                                     \
    if (::fa_test::device_of(backend).type == flashattn::DeviceType::cuda && !::fa_test::cuda_available()) \
      GTEST_SKIP() << "no CUDA device visible: " << backend << " not run";                                 \
  } while (0)

}  // namespace fa_test
