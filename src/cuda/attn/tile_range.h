#pragma once

// Which tiles a CTA must visit and which of them need the element-wise mask, derived from the one
// visibility rule of common/score.h (Mask). Plain C++ with FA_HD functions: the kernels call them per
// CTA and per tile, and tests/cpp/test_cuda_sm80.cpp checks them against Mask::visible by brute force.
//
// The facts used: key_begin(i) and key_end(i) are non-decreasing in i (the window slides with the
// diagonal i + sk - sq), so over rows [r0, r1] the visible keys lie in [key_begin(r0), key_end(r1)), and
// every key of [key_begin(r1), key_end(r0)) is visible to every row of [r0, r1].

#include <cstdint>

#include "common/host_device.h"
#include "common/score.h"

namespace flashattn::detail::cuda::attn {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end); empty when end <= begin
};

// Keys visible to at least one of the query rows [r0, r1] (a superset: the union of the rows' ranges).
FA_HD Range keys_for_rows(const Mask& m, int64_t r0, int64_t r1) { return Range{m.key_begin(r0), m.key_end(r1)}; }

// Query rows that see at least one of the keys [k0, k1] (a superset): rows with key_end(i) > k0 and
// key_begin(i) <= k1. Inverting the definitions of Mask (diag(i) = i + sk - sq):
//   key_end(i) = min(diag(i) + right + 1, sk) > k0      <=>  i >= k0 - sk + sq - right      (k0 < sk)
//   key_begin(i) = max(diag(i) - left, 0) <= k1          <=>  i <= k1 - sk + sq + left       (k1 >= 0)
FA_HD Range rows_for_keys(const Mask& m, int64_t k0, int64_t k1) {
  const auto clamp = [&](int64_t v) { return v < 0 ? int64_t(0) : (v > m.sq ? m.sq : v); };
  if (k0 >= m.sk || k1 < k0) return Range{m.sq, m.sq};
  const int64_t begin = m.window_right < 0 ? 0 : clamp(k0 - m.sk + m.sq - m.window_right);
  const int64_t end = m.window_left < 0 ? m.sq : clamp(k1 - m.sk + m.sq + m.window_left + 1);
  return Range{begin, end};
}

// The query tiles (block_m rows each) that key tile n (block_n keys, the last one cut at sk) must visit:
// [begin, end) in tile indices, {0, 0} when no row sees it.
FA_HD Range query_tiles_for_key_tile(const Mask& m, int64_t n, int block_n, int block_m) {
  const int64_t k0 = n * block_n, k1 = (m.sk - k0 < block_n ? m.sk : k0 + block_n) - 1;
  const Range rows = rows_for_keys(m, k0, k1);
  if (rows.end <= rows.begin) return Range{0, 0};
  return Range{rows.begin / block_m, (rows.end + block_m - 1) / block_m};
}

// True when every key of [k0, k1] is visible to every row of [r0, r1]: such a tile needs no mask.
FA_HD bool tile_fully_visible(const Mask& m, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
  return m.key_begin(r1) <= k0 && k1 < m.key_end(r0);
}

}  // namespace flashattn::detail::cuda::attn
