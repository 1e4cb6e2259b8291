#pragma once

// Functions shared by CPU and CUDA code (masks, score modifiers, RNG, conversions) are marked FA_HD.
#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif
