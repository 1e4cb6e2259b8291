#pragma once

// FP8 caches in the decode kernel (decode_tile.h, kFp8Cache): a K/V tile copied into a ring stage as e4m3
// bytes is converted by the whole block into the 16-bit tile the products read (tile_offset's layout).
// e4m3 values are exact in f16 and in bf16, so the converted tile holds the stored values; the descale
// factors are applied to the scores and to the output instead (attention_kernel.cuh). The conversions are
// CUDA's (cuda_fp8.h): one cvt.rn.f16x2.e4m3x2 per pair on sm_89 and later.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/decode/tile_loader.cuh"

namespace flashattn::detail::cuda::decode {

// Two e4m3 codes (the low and high byte of `pair`) as a packed pair of T.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint16_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair), __NV_E4M3);
  uint32_t out;
  if constexpr (std::is_same_v<T, __half>) {
    out = uint32_t(h.x) | uint32_t(h.y) << 16;
  } else {
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);  // exact: every e4m3 value is a bf16 value
    out = *reinterpret_cast<const uint32_t*>(&b);
  }
  return out;
}

// 16 e4m3 codes (one 16-byte chunk of a cache row) as two 16-byte chunks of T, in element order.
template <typename T>
__device__ __forceinline__ void e4m3x16_to(uint4 in, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = e4m3x2_to<T>(uint16_t(w[i] & 0xFFFFu));
    o[2 * i + 1] = e4m3x2_to<T>(uint16_t(w[i] >> 16));
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

// Converts the ring stage (k8, v8: kBlockN rows of kHeadDim bytes) into the 16-bit tiles k, v. Every thread
// of the block takes 16-byte chunks in turn: consecutive threads read consecutive chunks of a row.
template <typename Tile, typename T>
__device__ __forceinline__ void convert_kv_tile(const uint8_t* k8, const uint8_t* v8, T* k, T* v) {
  static_assert(Tile::kFp8Cache, "FP8 caches only");
  for (int idx = threadIdx.x; idx < Tile::kBlockN * Tile::kCacheChunks; idx += Tile::kThreads) {
    const int row = idx / Tile::kCacheChunks, c = idx % Tile::kCacheChunks;
    const int src = row * Tile::kHeadDim + 16 * c;
    uint4 lo, hi;
    e4m3x16_to<T>(*reinterpret_cast<const uint4*>(k8 + src), lo, hi);
    *reinterpret_cast<uint4*>(k + tile_offset<Tile, Tile::kBlockN>(row, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(k + tile_offset<Tile, Tile::kBlockN>(row, 2 * c + 1)) = hi;
    e4m3x16_to<T>(*reinterpret_cast<const uint4*>(v8 + src), lo, hi);
    *reinterpret_cast<uint4*>(v + tile_offset<Tile, Tile::kBlockN>(row, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(v + tile_offset<Tile, Tile::kBlockN>(row, 2 * c + 1)) = hi;
  }
}

}  // namespace flashattn::detail::cuda::decode
