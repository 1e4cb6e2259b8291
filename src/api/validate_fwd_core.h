#pragma once

// Internals of validation shared between forward and backward.

#include "api/checks.h"
#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail {

// q, k, v, varlen offsets and options; leaves out/lse unset.
FwdProblem make_fwd_core(const ArgChecker& c, const FwdParams& p);
// `t` must have the shape, dtype and device of q.
void check_out_like_q(const ArgChecker& c, const Tensor& t, const char* name, const Tensor& q);
// `t` must have the shape, dtype and device of `ref`.
void check_like(const ArgChecker& c, const Tensor& t, const char* name, const Tensor& ref, const char* ref_name);
LseView lse_view(const ArgChecker& c, const Tensor& lse, const FwdProblem& pr, bool required);

}  // namespace flashattn::detail
