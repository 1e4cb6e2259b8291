// The FP8 forward's instance (fp8_fwd_kernel.cuh), compiled for sm_90a only (cmake/FlashattnCuda.cmake).

#include "cuda/sm90/fp8_fwd_kernel.cuh"

namespace flashattn::detail::cuda::sm90 {

template void run_fwd_fp8<128>(const FwdArgs&, cudaStream_t);

}  // namespace flashattn::detail::cuda::sm90
