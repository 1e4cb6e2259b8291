#pragma once

// Host-side entry points of the cuda_decode backend's kernels: append + rotary (append_rotary.cu), the
// split-KV attention (attention_d*.cu, one file per head-dim bucket) and the split combine (combine.cu).
// decode_backend.cpp sequences them on the call's stream. docs/decode.md describes the algorithm.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "api/problem.h"
#include "cuda/decode/decode_tile.h"

namespace flashattn::detail::cuda::decode {

// What the launch code and the split heuristic need to know about one attention instantiation.
struct KernelShape {
  int rows = 0;     // packed query rows per block
  int block_n = 0;  // keys per K/V tile
  int threads = 0;
  size_t smem = 0;
  int blocks_per_sm = 0;  // resident blocks per SM on the device (occupancy)
};

// Opts the attention kernel of (dtype, head-dim bucket, row shape, FP8 or 16-bit cache, paged or contiguous
// cache) into the
// device's per-block shared memory limit on `device` (the current device) and reads its occupancy with
// the tile's own shared memory, once per device. Must precede launch_attention, which picks the paged
// instance when p.cache is paged and the FP8 one when p.cache_dtype is fp8_e4m3.
KernelShape prepare_attention(DType dtype, int bucket, RowShape shape, bool fp8_cache, bool paged, int device);
// smem: the dynamic shared memory of the launch, at least KernelShape::smem (more reserves room that
// the kernel does not use, to limit the blocks per SM). after_kernel: a kernel of this call precedes it
// on the stream, so it may use programmatic dependent launch (cuda/common/pdl.cuh;
// DecodeArgs::wait_for_inputs says whether that kernel wrote what it reads).
void launch_attention(DType dtype, int bucket, RowShape shape, const KVCacheProblem& p, const DecodeArgs& a,
                      int64_t blocks, size_t smem, bool after_kernel, cudaStream_t stream);

// The per-bucket and per-cache-type parts of the two functions above.
template <int kHeadDim, bool kFp8Cache>
KernelShape prepare_attention_for(DType dtype, RowShape shape, bool paged, int device);
template <int kHeadDim, bool kFp8Cache>
void launch_attention_for(DType dtype, RowShape shape, const KVCacheProblem& p, const DecodeArgs& a, int64_t blocks,
                          size_t smem, bool after_kernel, cudaStream_t stream);

// Writes k_new/v_new (k rotated) into the cache at positions cache_seqlens[b] + t and, when q_rot is
// not null, q rotated into q_rot, a contiguous (batch, seqlen_q, heads, head_dim) buffer. The call's
// first kernel; returns whether there was anything to launch.
bool launch_append_rotary(const KVCacheProblem& p, void* q_rot, cudaStream_t stream);

// Merges a.num_splits partials (DecodeArgs::part_out/part_lse) into out and LSE. Launched right after the
// attention kernel, with programmatic dependent launch where its code was built for sm_90+.
void launch_combine(const KVCacheProblem& p, const DecodeArgs& a, cudaStream_t stream);

}  // namespace flashattn::detail::cuda::decode
