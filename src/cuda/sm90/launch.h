#pragma once

// Host entry points of the sm90 forward: run_fwd<T, bucket, general> launches one (dtype, head-dim bucket,
// instance) kernel (kGeneral: softcap or ALiBi, attn/score_args.h);
// it is defined in fwd_kernel.cuh and explicitly instantiated in fwd_hdim<D>.cu, which are compiled for
// sm_90a only (cmake/FlashattnCuda.cmake).

#include <cuda_runtime_api.h>

#include "cuda/sm90/args.h"
#include "cuda/sm90/bwd_args.h"

namespace flashattn::detail::cuda::sm90 {

template <typename T, int kHeadDim, bool kGeneral>
void run_fwd(const FwdArgs& args, cudaStream_t stream);

// The FP8 (e4m3) forward at head dim kHeadDim (128): fp8_fwd_kernel.cuh, instantiated in fp8_fwd.cu (sm_90a
// only, with the 128 bucket).
template <int kHeadDim>
void run_fwd_fp8(const FwdArgs& args, cudaStream_t stream);

// The backward's main kernel of one (dtype, head-dim bucket): bwd_kernel.cuh, instantiated in
// bwd_hdim<D>.cu (sm_90a only).
template <typename T, int kHeadDim>
void run_bwd(const BwdArgs& args, cudaStream_t stream);

// The whole backward (launch_bwd.cu): workspaces, D, the main kernel, dQ's conversion. `args` holds the maps
// and the problem; the workspaces are filled in here.
void launch_bwd(BwdArgs args, cudaStream_t stream);

}  // namespace flashattn::detail::cuda::sm90
