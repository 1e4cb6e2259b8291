// Forward kernels of head-dim bucket 160 (f16 and bf16). One file per (direction, bucket) so that the
// build compiles buckets in parallel and FLASHATTN_HEAD_DIMS can leave this one out.

#include "cuda/sm80/fwd_kernel.cuh"

#if defined(FLASHATTN_HDIM_160)
namespace flashattn::detail::cuda::sm80 {
template void run_fwd<__half, 160>(FwdArgs, bool, cudaStream_t);
template void run_fwd<__nv_bfloat16, 160>(FwdArgs, bool, cudaStream_t);
}  // namespace flashattn::detail::cuda::sm80
#endif
