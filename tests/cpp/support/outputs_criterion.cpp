#include "outputs_criterion.h"

#include <gtest/gtest.h>

#include "criterion.h"

namespace fa_test {

void expect_forward_within_criterion(const FwdOutputs& got, const FwdOutputs& ref, const NaiveOutputs& naive,
                                     DType dtype) {
  EXPECT_TRUE(within_criterion("out", got.out, ref.out.to_double(), naive.out, dtype));
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, ref.lse.to_double(), naive.lse, DType::f32));
}

void expect_backward_within_criterion(const BwdOutputs& got, const BwdOutputs& ref, const NaiveOutputs& naive,
                                      DType dtype) {
  EXPECT_TRUE(within_criterion("dq", got.dq, ref.dq.to_double(), naive.dq, dtype));
  EXPECT_TRUE(within_criterion("dk", got.dk, ref.dk.to_double(), naive.dk, dtype));
  EXPECT_TRUE(within_criterion("dv", got.dv, ref.dv.to_double(), naive.dv, dtype));
}

}  // namespace fa_test
