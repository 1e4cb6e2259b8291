#pragma once

// The context-parallel test cases, shared by the ring-of-one test (main gtest binary) and the MPI test
// program (2, 3 and 4 ranks). Small sizes: the MPI runs oversubscribe a 2-core machine.

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "ring_harness.h"

namespace fa_test {

std::vector<DistCase> dist_cases();

// A test parameter: (backend, index into dist_cases()).
using DistParam = std::tuple<std::string, int>;

// Runs a case's forward (and backward) on `comm` and, on rank 0 only (where the gathered outputs are
// compared), checks them with flash-attn's criterion against the fp64 oracle on the same full inputs.
// Every rank must call it; the result is meaningful on rank 0 and success elsewhere.
testing::AssertionResult check_distributed(const DistRun& run, const DistCase& c, const std::string& backend,
                                           uint64_t seed);
inline testing::AssertionResult check_distributed(flashattn::dist::Communicator& comm, const DistCase& c,
                                                  const std::string& backend, uint64_t seed) {
  return check_distributed(DistRun{comm}, c, backend, seed);
}

// The body of the parameterised dist tests: checks case std::get<1>(param) of dist_cases() on backend
// std::get<0>(param) over `run` (inputs seeded by the case index), and skips the test with the backend's
// reason when it does not support the case.
void expect_case(const DistRun& run, const DistParam& param);

// A shard of the wrong length on the last rank only (causal bf16 attention on comm.device()) must make
// every rank throw before any transfer: the last rank with its own message, the others pointing at it.
void expect_one_rank_mistake_fails_every_rank(flashattn::dist::Communicator& comm);

// Backends of `device` that can do the per-block calls: every one for the forward; for the backward only
// those whose backward reads the given softmax_lse/out (all but cpu_reference).
std::vector<std::string> dist_backends(bool backward, flashattn::DeviceType device = flashattn::DeviceType::cpu);

// The test parameters: (backend, index into dist_cases()) for every case a backend of `device` can run.
std::vector<DistParam> dist_params(flashattn::DeviceType device = flashattn::DeviceType::cpu);
std::string dist_param_name(const testing::TestParamInfo<DistParam>& info);

}  // namespace fa_test
