#pragma once

// Host entry points of the sm90 forward: run_fwd<T, bucket, general> launches one (dtype, head-dim bucket,
// instance) kernel (kGeneral: softcap or ALiBi, attn/score_args.h);
// it is defined in fwd_kernel.cuh and explicitly instantiated in fwd_hdim<D>.cu, which are compiled for
// sm_90a only (cmake/FlashattnCuda.cmake).

#include <cuda_runtime_api.h>

#include "cuda/sm90/args.h"

namespace flashattn::detail::cuda::sm90 {

template <typename T, int kHeadDim, bool kGeneral>
void run_fwd(const FwdArgs& args, cudaStream_t stream);

}  // namespace flashattn::detail::cuda::sm90
