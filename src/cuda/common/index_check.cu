// The opt-in index check's kernel: one block of kThreads threads, which is plenty for what it reads (a
// few values per sequence and the block-table entries the sequences use). Each warp takes sequences
// w, w + kWarps, ...: lane 0 checks the sequence's values, every lane a stride of its page entries. Each
// thread keeps the first fault it met (IndexFault::before), the block reduces them in shared memory and
// thread 0 writes the winner. Cost and use: docs/reliability.md.

#include <cuda_runtime.h>

#include "common/index_faults.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/index_check.h"
#include "cuda/common/workspace.h"

namespace flashattn::detail::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

__device__ __forceinline__ void keep_first(IndexFault& best, const IndexFault& f) {
  if (f.before(best)) best = f;
}

__device__ void reduce_and_write(IndexFault mine, IndexFault* out) {
  // Raw storage: a __shared__ array may not have IndexFault's default member initialisers.
  __shared__ alignas(IndexFault) unsigned char storage[kThreads * sizeof(IndexFault)];
  IndexFault* faults = reinterpret_cast<IndexFault*>(storage);
  faults[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x != 0) return;
  IndexFault best;
  for (int t = 0; t < kThreads; ++t) keep_first(best, faults[t]);
  *out = best;
}

__global__ void __launch_bounds__(kThreads) varlen_check_kernel(const FwdProblem p, IndexFault* out) {
  IndexFault best;
  for (int64_t i = threadIdx.x; i <= p.batch; i += kThreads) {
    keep_first(best, cu_seqlens_fault(p.cu_seqlens_q, i, p.batch, p.total_q, p.seqlen_q, false));
    keep_first(best, cu_seqlens_fault(p.cu_seqlens_k, i, p.batch, p.paged.block_table ? -1 : p.total_k, p.seqlen_k,
                                      true));
  }
  reduce_and_write(best, out);
}

__global__ void __launch_bounds__(kThreads) kvcache_check_kernel(const KVCacheProblem p, IndexFault* out) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  IndexFault best;
  for (int64_t b = warp; b < p.batch; b += kWarps) {
    if (lane == 0) keep_first(best, kv_sequence_fault(p, b));
    const PageColumns cols = kv_page_columns(p, b);
    for (int64_t i = cols.first + lane; i < cols.end; i += 32) keep_first(best, kv_page_fault(p, b, i));
  }
  reduce_and_write(best, out);
}

template <typename Problem, typename Launch>
IndexFault run_check(const Problem& p, cudaStream_t stream, Launch launch) {
  DeviceGuard guard(p.device);
  Workspace fault(sizeof(IndexFault), stream);
  launch(fault.as<IndexFault>());
  FA_CUDA_CHECK_LAUNCH("index check");
  IndexFault host;
  FA_CUDA_CHECK(cudaMemcpyAsync(&host, fault.as<IndexFault>(), sizeof(IndexFault), cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace

IndexFault find_index_fault(const FwdProblem& p, cudaStream_t stream) {
  if (!p.varlen() || p.batch == 0) return IndexFault{};
  return run_check(p, stream, [&](IndexFault* out) { varlen_check_kernel<<<1, kThreads, 0, stream>>>(p, out); });
}

IndexFault find_index_fault(const KVCacheProblem& p, cudaStream_t stream) {
  if (p.batch == 0) return IndexFault{};
  return run_check(p, stream, [&](IndexFault* out) { kvcache_check_kernel<<<1, kThreads, 0, stream>>>(p, out); });
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // the query's error is the answer, not a sticky failure of the call
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace flashattn::detail::cuda
