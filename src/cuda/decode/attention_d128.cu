// The decode attention kernels of head-dim bucket 128 for 16-bit caches (attention_launch.cuh).

#include "cuda/decode/attention_launch.cuh"

namespace flashattn::detail::cuda::decode {

template KernelShape prepare_attention_for<128, false>(DType, RowShape, bool, int);
template void launch_attention_for<128, false>(DType, RowShape, const KVCacheProblem&, const DecodeArgs&, int64_t,
                                               size_t, bool, cudaStream_t);

}  // namespace flashattn::detail::cuda::decode
