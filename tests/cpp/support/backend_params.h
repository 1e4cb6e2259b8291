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

// All but cpu_reference, plus "cpu_flash@<isa>" for every other instruction-set build of cpu_flash this
// CPU runs (flashattn::cpu_isas() but the first, which plain "cpu_flash" runs).
std::vector<std::string> tested_backends();

// The backend to name in a call for a tested backend; "cpu_flash@<isa>" forces that build of cpu_flash
// (flashattn::set_cpu_isa) until the object is destroyed.
class BackendUnderTest {
 public:
  explicit BackendUnderTest(const std::string& tested);
  ~BackendUnderTest();
  BackendUnderTest(const BackendUnderTest&) = delete;
  BackendUnderTest& operator=(const BackendUnderTest&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool forced_ = false;
};
std::string backend_case_name(const std::string& backend, const AttnConfig& cfg, int index);

// Skips the current test when `backend` cannot run here; returns the device to run on.
#define FA_SKIP_IF_DEVICE_MISSING(backend)                                                                 \
  do {                                                                                                     \
    if (::fa_test::device_of(backend).type == flashattn::DeviceType::cuda && !::fa_test::cuda_available()) \
      GTEST_SKIP() << "no CUDA device visible: " << backend << " not run";                                 \
  } while (0)

}  // namespace fa_test
