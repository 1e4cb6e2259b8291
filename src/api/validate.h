#pragma once

// Validation: turn the user's parameters into a normalised problem, or throw Error(invalid_argument)
// naming the first bad argument. Nothing is read from or written to tensor data here, except the
// values of int32 index tensors (cu_seqlens, cache_seqlens, block_table, ...) that live on the CPU;
// values of CUDA index tensors are not checked on the host since that would synchronise.

#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail {

FwdProblem make_fwd_problem(const FwdParams& params);
BwdProblem make_bwd_problem(const BwdParams& params);
KVCacheProblem make_kvcache_problem(const KVCacheParams& params);

}  // namespace flashattn::detail
