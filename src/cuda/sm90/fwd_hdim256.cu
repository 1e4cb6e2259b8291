// Forward kernels of head-dim bucket 256 (f16 and bf16), sm_90a only. One file per bucket so that the
// build compiles buckets in parallel and FLASHATTN_HEAD_DIMS can leave this one out.

#include "cuda/sm90/fwd_kernel.cuh"

#if defined(FLASHATTN_HDIM_256)
namespace flashattn::detail::cuda::sm90 {
template void run_fwd<__half, 256>(const FwdArgs&, cudaStream_t);
template void run_fwd<__nv_bfloat16, 256>(const FwdArgs&, cudaStream_t);
}  // namespace flashattn::detail::cuda::sm90
#endif
