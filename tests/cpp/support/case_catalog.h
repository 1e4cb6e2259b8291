#pragma once

// The shared catalogue of attention cases every backend is tested on (CPU and GPU alike). It covers
// each feature, dtype and head dim without the full cross product: a base case per (dtype, head dim),
// then shapes, GQA ratios, masks, score modifiers, dropout and ragged varlen batches.

#include <vector>

#include "attention_case.h"

namespace fa_test {

std::vector<AttnConfig> forward_cases();
std::vector<AttnConfig> backward_cases();
// A few cases of each kind, for compute-sanitizer runs and quick checks.
std::vector<AttnConfig> smoke_cases();

}  // namespace fa_test
