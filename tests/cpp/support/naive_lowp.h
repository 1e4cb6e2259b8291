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

// p_in_e4m3: the forward with the probabilities of P V stored as the native FP8 kernels store them (2^8 x
// exp(s - max) rounded to e4m3, the product then divided by 2^8 and the row sum): the low-precision
// baseline of an FP8 forward whose P is 8-bit.
NaiveOutputs naive_lowp(const AttnInputs& in, bool with_backward, bool p_in_e4m3 = false);

}  // namespace fa_test
