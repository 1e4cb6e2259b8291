#pragma once

// Head-dim buckets of the tiled CUDA kernels (sm80, the SIMT ladder, and every kernel that follows
// them): a head dim d (a multiple of 8) runs in the instance of the smallest bucket >= d, with the dims
// beyond d zero-filled on load and never stored. Buckets step by 32 so that a 32-lane warp's 16-byte
// chunks tile every bucket; the decode kernels use coarser instances of their own
// (decode_tile.h, decode_head_dim).

#include <cstdint>

namespace flashattn::detail::cuda::attn {

inline constexpr int kMaxHeadDim = 256;
inline constexpr int kHeadDimBuckets[] = {32, 64, 96, 128, 160, 192, 224, 256};

constexpr int head_dim_bucket(int64_t head_dim) { return head_dim <= 32 ? 32 : int((head_dim + 31) / 32) * 32; }

// The head-dim buckets this build instantiates: cmake/FlashattnCuda.cmake defines FLASHATTN_HDIM_<d>
// for each bucket of the FLASHATTN_HEAD_DIMS option (all of them by default).
constexpr bool head_dim_compiled(int bucket) {
  switch (bucket) {
#if defined(FLASHATTN_HDIM_32)
    case 32:
      return true;
#endif
#if defined(FLASHATTN_HDIM_64)
    case 64:
      return true;
#endif
#if defined(FLASHATTN_HDIM_96)
    case 96:
      return true;
#endif
#if defined(FLASHATTN_HDIM_128)
    case 128:
      return true;
#endif
#if defined(FLASHATTN_HDIM_160)
    case 160:
      return true;
#endif
#if defined(FLASHATTN_HDIM_192)
    case 192:
      return true;
#endif
#if defined(FLASHATTN_HDIM_224)
    case 224:
      return true;
#endif
#if defined(FLASHATTN_HDIM_256)
    case 256:
      return true;
#endif
    default:
      return false;
  }
}

}  // namespace flashattn::detail::cuda::attn
