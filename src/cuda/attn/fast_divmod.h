#pragma once

// Division by a divisor fixed for a whole call (the page size of a paged KV cache), as a multiply-high
// and a shift: the decode kernel and the sm80 forward split key positions into (page, row in page), and
// a 32-bit hardware division costs ~20 instructions, a 64-bit one far more.
//
// Method (Granlund & Montgomery, "Division by invariant integers using multiplication", Thm 4.2): with
// l = ceil(log2(d)) and m = ceil(2^(32+l) / d), floor(n / d) = floor(n * m / 2^(32+l)) for 0 <= n < 2^32,
// because 0 <= m * d - 2^(32+l) < d <= 2^l. m lies in [2^32, 2^33), so it is stored as m' = m - 2^32 and
// n * m / 2^32 = n + umulhi(n, m'). The sum n + umulhi(n, m') < 2n fits in 32 bits for n < 2^31, which
// the callers guarantee (cache positions are below 2^31, checked by the backend's supports function).

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::detail::cuda::attn {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;  // m - 2^32
  uint32_t shift = 0;       // l

  // (n / divisor, n % divisor) for 0 <= n < 2^31.
  FA_HD void divmod(uint32_t n, uint32_t* quotient, uint32_t* remainder) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = uint32_t((uint64_t(n) * multiplier) >> 32);
#endif
    *quotient = (n + hi) >> shift;
    *remainder = n - *quotient * divisor;
  }
};

// The constants for divisor d in [1, 2^31).
inline FastDivmod make_fast_divmod(uint32_t d) {
  FastDivmod f;
  f.divisor = d;
  uint32_t l = 0;
  while ((uint64_t(1) << l) < d) ++l;                          // l = ceil(log2(d)); 0 for d = 1
  const uint64_t m = ((uint64_t(1) << (32 + l)) + d - 1) / d;  // l <= 31: 2^(32+l) fits in 64 bits
  f.multiplier = uint32_t(m - (uint64_t(1) << 32));
  f.shift = l;
  return f;
}

}  // namespace flashattn::detail::cuda::attn
