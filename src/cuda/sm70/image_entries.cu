// The kernels of the sm_70 image: cuda_sm70's kernels of every compiled head-dim bucket under plain C names
// (flashattn_sm70_fwd_d<bucket>, ..._cache_d<bucket>, ..._bwd_kv_d<bucket> or, above head dim 128,
// ..._bwd_kv_dv_d / ..._bwd_kv_dk_d, ..._bwd_dq_d<bucket>; ..._bwd_dsum, ..._append_rotary and the
// dispatcher's head-dim padding copies ..._pad_b16 / ..._unpad_b16), which
// backend.cu names and image.cpp looks up in the loaded image. Not part of the library's sources:
// cmake/FlashattnSm70.cmake compiles this file to PTX, retargets it to sm_70 and embeds it (and, with a
// CUDA 12 ptxas, the sm_70 cubin assembled from it) in the library as a compressed fatbin, because CUDA 13
// compiles nothing older than sm_75 (docs/kernels.md, "cuda_sm70").

#include "api/head_dim_pad_kernels.cuh"
#include "cuda/attn/append_rotary.cuh"
#include "cuda/attn/bwd_prepost.cuh"
#include "cuda/attn/head_dim.h"
#include "cuda/sm70/bwd_kernel.cuh"
#include "cuda/sm70/fwd_kernel.cuh"

namespace sm70 = flashattn::detail::cuda::sm70;
namespace attn = flashattn::detail::cuda::attn;

#define FLASHATTN_SM70_ENTRY(name, Args, threads, body) \
  extern "C" __global__ void __launch_bounds__(threads) name(const __grid_constant__ Args args) { body; }

// Every bucket: the forward, the KV-cache forward and the dQ kernel, and dK/dV in one pass up to head dim 128
// (ONE_PASS), in two above (TWO_PASS; BwdTile::split_passes).
#define FLASHATTN_SM70_ENTRIES(D)                                                                                   \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_fwd_d##D, sm70::FwdArgs, sm70::FwdTile::kThreads, sm70::fwd_cta<D>(args))     \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_cache_d##D, sm70::CacheArgs, sm70::FwdTile::kThreads, sm70::fwd_cta<D>(args)) \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_bwd_dq_d##D, attn::BwdArgs, sm70::BwdTile::kThreads, sm70::bwd_dq_cta<D>(args))
#define FLASHATTN_SM70_ONE_PASS(D)                                                         \
  FLASHATTN_SM70_ENTRIES(D)                                                                \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_bwd_kv_d##D, attn::BwdArgs, sm70::BwdTile::kThreads, \
                       (sm70::bwd_kv_cta<D, true, true>(args)))
#define FLASHATTN_SM70_TWO_PASS(D)                                                            \
  FLASHATTN_SM70_ENTRIES(D)                                                                   \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_bwd_kv_dv_d##D, attn::BwdArgs, sm70::BwdTile::kThreads, \
                       (sm70::bwd_kv_cta<D, true, false>(args)))                              \
  FLASHATTN_SM70_ENTRY(flashattn_sm70_bwd_kv_dk_d##D, attn::BwdArgs, sm70::BwdTile::kThreads, \
                       (sm70::bwd_kv_cta<D, false, true>(args)))
static_assert(!sm70::bwd_tile(128).split_passes() && sm70::bwd_tile(160).split_passes(),
              "the entries below split the dK/dV kernel above head dim 128");

FLASHATTN_SM70_ENTRY(flashattn_sm70_bwd_dsum, attn::BwdArgs, attn::kPrepostThreads, attn::bwd_dsum<__half>(args))

// The dispatcher's head-dim padding copies of 16-bit tensors (api/head_dim_pad_kernels.cuh).
extern "C" __global__ void flashattn_sm70_pad_b16(const uint16_t* __restrict__ src, uint16_t* __restrict__ dst,
                                                  flashattn::detail::RegionShape s, int64_t n) {
  flashattn::detail::pad_elements(src, dst, s, n);
}
extern "C" __global__ void flashattn_sm70_unpad_b16(const uint16_t* __restrict__ src, uint16_t* __restrict__ dst,
                                                    flashattn::detail::RegionShape s, int64_t n) {
  flashattn::detail::unpad_elements(src, dst, s, n);
}

extern "C" __global__ void __launch_bounds__(32 * attn::kAppendWarps)
    flashattn_sm70_append_rotary(const flashattn::detail::KVCacheProblem p, __half* q_rot) {
  attn::append_rotary_row<__half, __half>(p, q_rot, int(blockIdx.x) * attn::kAppendWarps + int(threadIdx.x) / 32,
                                          int(threadIdx.x) % 32);
}

#if defined(FLASHATTN_HDIM_32)
FLASHATTN_SM70_ONE_PASS(32)
#endif
#if defined(FLASHATTN_HDIM_64)
FLASHATTN_SM70_ONE_PASS(64)
#endif
#if defined(FLASHATTN_HDIM_96)
FLASHATTN_SM70_ONE_PASS(96)
#endif
#if defined(FLASHATTN_HDIM_128)
FLASHATTN_SM70_ONE_PASS(128)
#endif
#if defined(FLASHATTN_HDIM_160)
FLASHATTN_SM70_TWO_PASS(160)
#endif
#if defined(FLASHATTN_HDIM_192)
FLASHATTN_SM70_TWO_PASS(192)
#endif
#if defined(FLASHATTN_HDIM_224)
FLASHATTN_SM70_TWO_PASS(224)
#endif
#if defined(FLASHATTN_HDIM_256)
FLASHATTN_SM70_TWO_PASS(256)
#endif
