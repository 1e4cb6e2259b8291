#pragma once

// One call of a named CUDA backend against the fp64 reference under flash-attn's criterion (naive baseline
// in the inputs' dtype), for the per-backend GPU tests (test_cuda_sm70.cpp, test_cuda_sm80.cpp). An
// `unsupported` error (an old GPU, a pruned head dim) skips the test with its reason.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "attention_case.h"
#include "flashattn/error.h"

// Runs `body`; an `unsupported` error skips the test with its reason, any other propagates.
#define FA_SKIP_IF_UNSUPPORTED(body)                                            \
  try {                                                                         \
    body;                                                                       \
  } catch (const flashattn::Error& e) {                                         \
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what(); \
    throw;                                                                      \
  }

namespace fa_test {

// A small GQA problem (batch 1, 2 query heads on 1 kv head) for a tile-boundary sweep of head-dim bucket
// `bucket`: every other bucket runs a head dim 8 below it, whose padded dims are zero-filled, never stored.
AttnConfig bucket_config(int bucket, int64_t sq, int64_t sk, bool causal, DType dtype);

void expect_forward_matches_on(const std::string& backend, const AttnConfig& cfg, uint64_t seed);
void expect_backward_matches_on(const std::string& backend, const AttnConfig& cfg, uint64_t seed, bool deterministic);

}  // namespace fa_test
