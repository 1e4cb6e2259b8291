#pragma once

// Dropout keep bits for MMA accumulator fragments, bit-identical to common/philox.h's dropout_keep.
// One Philox call (dropout_words) yields the 4 words of 4 consecutive keys j = 4 (j / 4) .. + 3 of one
// query row; word j % 4 decides key j. No thread holds 4 consecutive keys of a row in an m16n8
// accumulator, so each thread draws one group of 4 for a neighbour set of lanes, turns it into a 4-bit
// nibble (bit w = word w >= threshold) and the lanes exchange nibbles with __shfl_xor_sync: one Philox
// call per 4 elements, the minimum.

#include <cstdint>

#include "common/philox.h"
#include "cuda/attn/dropout_lanes.h"

namespace flashattn::detail::cuda::attn {

// Row-major fragment (rows row_lo = r0 + g and row_lo + 8, keys key0 + 2t, +1 with key0 a multiple of 8).
// Lanes t and t^1 share the key group key0 + 4 (t / 2) .. + 3: lane t draws it for row_lo when t is even
// and for row_lo + 8 when t is odd, and puts the nibble at bits [4 (t % 2), 4 (t % 2) + 4).
// Element e (row half e / 2, key 2t + e % 2, whose word is 2 (t % 2) + e % 2 of its group) is kept iff
// bit 4 (e / 2) + 2 (t % 2) + e % 2 is set (dropout_lanes.h).
__device__ __forceinline__ uint32_t keep_bits_rowmajor(const DropoutParams& d, uint32_t threshold, int64_t b, int64_t h,
                                                       int64_t heads, int64_t row0, int64_t key0, int lane) {
  const DropoutDraw w = dropout_draw_rowmajor(lane);
  uint32_t bits = keep_nibble(dropout_words(d, b, h, heads, row0 + w.query, key0 + w.key), threshold) << w.shift;
  bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
  return bits;
}
__device__ __forceinline__ bool kept_rowmajor(uint32_t bits, int e, int lane) {
  return (bits >> dropout_bit_rowmajor(e, lane)) & 1u;
}

// Transposed fragment S^T (keys k0 + g and k0 + g + 8 with k0 a multiple of 16; queries q0 + 2t, +1).
// With g = 4a + r, the 4 lanes r = 0..3 of equal (a, t) (lanes 16a + 4r + t: they differ in lane bits
// 2-3) together need the 4 groups G = (query bit) + 2 (key half): keys k0 + 8 (G / 2) + 4a .. + 3 of
// query q0 + 2t + G % 2, and each needs word r of every group. Lane r draws group G = r and puts its
// nibble at bits [4r, 4r + 4); two xor-shuffles (4, 8) gather all 16 bits in every lane.
// Element e (key half e / 2, query bit e % 2) lies in group G = e, so it is kept iff bit 4e + r is set.
__device__ __forceinline__ uint32_t keep_bits_transposed(const DropoutParams& d, uint32_t threshold, int64_t b,
                                                         int64_t h, int64_t heads, int64_t k0, int64_t q0, int lane) {
  const DropoutDraw w = dropout_draw_transposed(lane);
  uint32_t bits = keep_nibble(dropout_words(d, b, h, heads, q0 + w.query, k0 + w.key), threshold) << w.shift;
  bits |= __shfl_xor_sync(0xffffffffu, bits, 4);
  bits |= __shfl_xor_sync(0xffffffffu, bits, 8);
  return bits;
}
__device__ __forceinline__ bool kept_transposed(uint32_t bits, int e, int lane) {
  return (bits >> dropout_bit_transposed(e, lane)) & 1u;
}

}  // namespace flashattn::detail::cuda::attn
