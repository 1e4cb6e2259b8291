#pragma once

// within_criterion (criterion.h) over every output of a forward (out, LSE) or a backward (dq, dk, dv)
// call, one EXPECT per tensor, against the fp64 reference and the naive low-precision run.

#include "attention_case.h"
#include "naive_lowp.h"

namespace fa_test {

void expect_forward_within_criterion(const FwdOutputs& got, const FwdOutputs& ref, const NaiveOutputs& naive,
                                     DType dtype);
void expect_backward_within_criterion(const BwdOutputs& got, const BwdOutputs& ref, const NaiveOutputs& naive,
                                      DType dtype);

}  // namespace fa_test
