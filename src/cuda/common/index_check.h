#pragma once

// The device side of the opt-in index check (common/index_faults.h): one small kernel validates every
// index value of a call on its stream and the first fault is copied back. It synchronises the stream,
// so src/api refuses it while the stream is being captured into a CUDA graph (stream_is_capturing).

#include <cuda_runtime_api.h>

#include "api/problem.h"
#include "common/index_faults.h"

namespace flashattn::detail::cuda {

// The first fault (by batch, kind, entry) among the index values of the call, or none. Synchronises `stream`.
IndexFault find_index_fault(const FwdProblem& p, cudaStream_t stream);
IndexFault find_index_fault(const KVCacheProblem& p, cudaStream_t stream);

// Whether work issued to `stream` now would be captured into a graph (an error querying it counts as yes:
// the legacy stream during another stream's global capture reports one).
bool stream_is_capturing(cudaStream_t stream);

}  // namespace flashattn::detail::cuda
