// Backward kernels of head-dim bucket 256 (f16 and bf16): the main dK/dV(/dQ) kernel and the
// deterministic dQ kernel. One file per (direction, bucket) so that the build compiles buckets in
// parallel and FLASHATTN_HEAD_DIMS can leave this one out.

#include "cuda/sm80/bwd_dq_kernel.cuh"
#include "cuda/sm80/bwd_kernel.cuh"

#if defined(FLASHATTN_HDIM_256)
namespace flashattn::detail::cuda::sm80 {
template void run_bwd<__half, 256>(BwdArgs, int64_t, cudaStream_t);
template void run_bwd<__nv_bfloat16, 256>(BwdArgs, int64_t, cudaStream_t);
template void run_bwd_dq<__half, 256>(BwdArgs, cudaStream_t);
template void run_bwd_dq<__nv_bfloat16, 256>(BwdArgs, cudaStream_t);
}  // namespace flashattn::detail::cuda::sm80
#endif
