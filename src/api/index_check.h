#pragma once

// The opt-in check of index values on a CUDA device (AttentionOptions::check_index_values or the
// environment variable FLASHATTN_CHECK_INDEX_VALUES=1): before the attention, a small kernel validates
// every value of cu_seqlens, cache_seqlens, cache_batch_idx, cache_leftpad and block_table with the rules
// of the CPU backends' host checks, and the first fault becomes the same named error (argument, batch
// index, value). Off by default: it synchronises the stream. Refused during CUDA graph capture. CPU
// calls are always checked on the host (validate_*.cpp), so it does nothing for them.

#include "api/problem.h"
#include "common/index_faults.h"
#include "flashattn/params.h"

namespace flashattn::detail {

// Whether the call asks for the check: the option, or FLASHATTN_CHECK_INDEX_VALUES=1 (read per call).
bool index_check_requested(const AttentionOptions& options);

// Runs the check when requested and the call is on a CUDA device; throws the named error on a fault.
// `function` names the entry point ("flashattn::forward", ...).
void check_index_values_on_device(const FwdProblem& p, const AttentionOptions& options, Stream stream,
                                  const char* function);
void check_index_values_on_device(const KVCacheProblem& p, const AttentionOptions& options, Stream stream,
                                  const char* function);

// The named error of a fault found on the device (invalid_argument), as the host checks word it.
[[noreturn]] void raise_index_fault(const char* function, const IndexFault& f, const Device& device);

}  // namespace flashattn::detail
