#pragma once

// Which Philox group each lane draws for dropout, and where each accumulator element finds its keep bit
// (derivations in dropout.cuh). Plain C++ with FA_HD functions so tests/cpp/test_cuda_sm80.cpp can replay
// a warp on the host against common/philox.h's dropout_keep. g = lane / 4, t = lane % 4.

#include <cstdint>

#include "common/host_device.h"
#include "common/philox.h"

namespace flashattn::detail::cuda::attn {

// Bit w = keep decision of word w (key 4 (j / 4) + w) of one Philox draw.
FA_HD uint32_t keep_nibble(const Philox4& w, uint32_t threshold) {
  return uint32_t(w.x >= threshold) | uint32_t(w.y >= threshold) << 1 | uint32_t(w.z >= threshold) << 2 |
         uint32_t(w.w >= threshold) << 3;
}

// The group (4 consecutive keys of one query row) a lane draws, relative to the fragment's first row or
// query and first key, and the bit position of its 4-bit nibble in the exchanged word.
struct DropoutDraw {
  int query, key, shift;
};

// Row-major fragment (rows r0 + g, r0 + g + 8; keys k0 + 2t, +1): lanes t, t ^ 1 share keys
// k0 + 4 (t / 2) .. + 3; the even one draws row g, the odd one row g + 8. Exchanged with xor 1.
FA_HD DropoutDraw dropout_draw_rowmajor(int lane) {
  const int g = lane >> 2, t = lane & 3;
  return DropoutDraw{g + 8 * (t & 1), 4 * (t >> 1), 4 * (t & 1)};
}
// Element e (row g + 8 (e / 2), key 2t + e % 2: word 2 (t % 2) + e % 2 of its group).
FA_HD int dropout_bit_rowmajor(int e, int lane) { return 4 * (e >> 1) + 2 * (lane & 1) + (e & 1); }

// Transposed fragment (keys k0 + g, k0 + g + 8; queries q0 + 2t, +1), g = 4a + r: lane r of the four
// lanes with equal (a, t) draws group G = r = (query bit) + 2 (key half): query 2t + r % 2, keys
// 8 (r / 2) + 4a .. + 3. Exchanged with xor 4 and xor 8.
FA_HD DropoutDraw dropout_draw_transposed(int lane) {
  const int g = lane >> 2, t = lane & 3, r = g & 3, a = g >> 2;
  return DropoutDraw{2 * t + (r & 1), 8 * (r >> 1) + 4 * a, 4 * r};
}
// Element e (key g + 8 (e / 2), query 2t + e % 2) lies in group G = e at word r.
FA_HD int dropout_bit_transposed(int e, int lane) { return 4 * e + ((lane >> 2) & 3); }

}  // namespace flashattn::detail::cuda::attn
