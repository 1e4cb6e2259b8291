#pragma once

// Validation of the paged K/V and seqused_k of a varlen forward (FwdParams::block_table, seqused_k).

#include "api/checks.h"
#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail {

inline constexpr const char* kPagedKeyDims = "(num_blocks, page_size, heads_k, head_dim)";

// Shapes of k, v (paged) and block_table; pr's heads_k and head_dim must be set.
PagedKeys paged_keys(const ArgChecker& c, const FwdParams& p, const FwdProblem& pr);
// seqused_k's dtype, device and shape (batch); nullptr when absent. pr's batch must be set.
const int32_t* seqused_keys(const ArgChecker& c, const Tensor& seqused_k, const FwdProblem& pr);
// Host-side values (CPU calls): every sequence's key count within what it can address (its cu_seqlens_k
// span, or the block table's capacity) and within max_seqlen_k, and the blocks it reads in [0, num_blocks).
// cu_seqlens_k must already have been checked.
void check_key_counts(const ArgChecker& c, const FwdParams& p, const FwdProblem& pr);

}  // namespace flashattn::detail
