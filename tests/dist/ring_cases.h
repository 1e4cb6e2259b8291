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

// Runs a case's forward (and backward) on `comm` and, on rank 0 only (where the gathered outputs are
// compared), checks them with flash-attn's criterion against the fp64 oracle on the same full inputs.
// Every rank must call it; the result is meaningful on rank 0 and success elsewhere.
testing::AssertionResult check_distributed(flashattn::dist::Communicator& comm, const DistCase& c,
                                           const std::string& backend, uint64_t seed);

// CPU backends that can do the per-block calls: every CPU backend for the forward; for the backward only
// those whose backward reads the given softmax_lse/out (all but cpu_reference).
std::vector<std::string> dist_backends(bool backward);

// The test parameters: (backend, index into dist_cases()) for every case a backend can run.
using DistParam = std::tuple<std::string, int>;
std::vector<DistParam> dist_params();
std::string dist_param_name(const testing::TestParamInfo<DistParam>& info);

}  // namespace fa_test
