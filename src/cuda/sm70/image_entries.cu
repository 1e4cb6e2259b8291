// The kernels of the sm_70 image: the cuda_sm70 forward of every compiled head-dim bucket under a plain
// C name (flashattn_sm70_fwd_d<bucket>), which image.cpp looks up in the loaded image. Not part of the
// library's sources: cmake/FlashattnSm70.cmake compiles this file to PTX, retargets it to sm_70 and
// embeds it (and, with a CUDA 12 ptxas, the sm_70 cubin assembled from it) in the library, because CUDA 13
// compiles nothing older than sm_75 (docs/kernels.md, "cuda_sm70").

#include "cuda/attn/head_dim.h"
#include "cuda/sm70/fwd_kernel.cuh"

#define FLASHATTN_SM70_FWD_ENTRY(D)                                                                  \
  extern "C" __global__ void __launch_bounds__(flashattn::detail::cuda::sm70::FwdTile::kThreads)     \
      flashattn_sm70_fwd_d##D(const __grid_constant__ flashattn::detail::cuda::sm70::FwdArgs args) { \
    flashattn::detail::cuda::sm70::fwd_cta<D>(args);                                                 \
  }

#if defined(FLASHATTN_HDIM_32)
FLASHATTN_SM70_FWD_ENTRY(32)
#endif
#if defined(FLASHATTN_HDIM_64)
FLASHATTN_SM70_FWD_ENTRY(64)
#endif
#if defined(FLASHATTN_HDIM_96)
FLASHATTN_SM70_FWD_ENTRY(96)
#endif
#if defined(FLASHATTN_HDIM_128)
FLASHATTN_SM70_FWD_ENTRY(128)
#endif
#if defined(FLASHATTN_HDIM_160)
FLASHATTN_SM70_FWD_ENTRY(160)
#endif
#if defined(FLASHATTN_HDIM_192)
FLASHATTN_SM70_FWD_ENTRY(192)
#endif
#if defined(FLASHATTN_HDIM_224)
FLASHATTN_SM70_FWD_ENTRY(224)
#endif
#if defined(FLASHATTN_HDIM_256)
FLASHATTN_SM70_FWD_ENTRY(256)
#endif
