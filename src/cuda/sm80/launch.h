#pragma once

// Host entry points of the sm80 kernels. launch_fwd / launch_bwd turn a problem into kernel arguments
// and dispatch on (dtype, head-dim bucket); run_* are the per-(dtype, bucket) launchers, defined in the
// kernel headers and explicitly instantiated once each in fwd_hdim<D>.cu / bwd_hdim<D>.cu.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "api/problem.h"
#include "cuda/sm80/args.h"

namespace flashattn::detail::cuda::sm80 {

template <typename T, int kHeadDim>
void run_fwd(FwdArgs args, bool paired, cudaStream_t stream);
template <typename T, int kHeadDim>
void run_bwd(BwdArgs args, int64_t smem_optin, cudaStream_t stream);
template <typename T, int kHeadDim>
void run_bwd_dq(BwdArgs args, cudaStream_t stream);

// Enqueue the whole forward / backward of `p` on `stream` (the caller has made p.device current).
// `paired`: the device runs the forward's paired tiles (use_paired_fwd). `persistent`: the forward may run
// a grid smaller than its tile list where every tile costs the same (fwd_kernel.cuh). `device`: what sizes
// a masked call's tile order (attn/tile_order.h); l2_bytes = 0: the per-head order. `smem_optin`: the shared
// memory a CTA of p.device may opt into, which picks the backward's partition.
struct DeviceFacts {
  int64_t l2_bytes = 0;
  int sms = 0;
};
void launch_fwd(const FwdProblem& p, bool general, bool paired, bool persistent, const DeviceFacts& device,
                cudaStream_t stream);
void launch_bwd(const BwdProblem& p, int64_t smem_optin, const DeviceFacts& device, cudaStream_t stream);

}  // namespace flashattn::detail::cuda::sm80
