#pragma once

// flash-attn's acceptance criterion: max|got - ref| <= 2 * max|naive_lowp - ref| + floor, where ref
// is the fp64 oracle and naive_lowp the same math done naively in the storage dtype. NaN in `got`
// (for example an unwritten, poisoned element) always fails; +inf must match +inf exactly.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host_tensor.h"

namespace fa_test {

// Absolute floor: a few units of rounding in `dtype` at the scale of the reference values.
double criterion_floor(DType dtype, const std::vector<double>& ref);

testing::AssertionResult within_criterion(const std::string& what, const HostTensor& got,
                                          const std::vector<double>& ref, const std::vector<double>& naive,
                                          DType dtype);

}  // namespace fa_test
