#pragma once

// A naive attention computed in the storage dtype: fp32 accumulation with every intermediate matrix
// rounded to the dtype (as a framework's unfused bf16/f16 math path does). Its error against the fp64
// oracle sets the tolerance of flash-attn's criterion: a backend may err at most twice as much.

#include <vector>

#include "attention_case.h"

namespace fa_test {

struct NaiveOutputs {
  std::vector<double> out, lse, dq, dk, dv;  // same layouts as the backend outputs
};

NaiveOutputs naive_lowp(const AttnInputs& in, bool with_backward);

}  // namespace fa_test
