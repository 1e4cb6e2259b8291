#pragma once

// Counter-based RNG for dropout: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11). The keep decision of attention element (b, h, i, j) is a pure function of
// (seed, offset, b, h, i, j), so every backend draws the same mask and backward replays forward's.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"

namespace flashattn::detail {

struct Philox4 {
  uint32_t x, y, z, w;
};

FA_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t prod = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(prod >> 32);
  return uint32_t(prod);
}

FA_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(kMul0, ctr.x, &hi0);
    uint32_t lo1 = mulhilo32(kMul1, ctr.z, &hi1);
    ctr = Philox4{hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return ctr;
}

// Elements with a random word below this threshold are dropped: P(drop) = threshold / 2^32 ~= p.
FA_HD uint32_t dropout_threshold(float p) {
  double t = double(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(t);
}

// The four random words covering keys j = 4*(j/4) .. 4*(j/4)+3 of row (b, h, i). Exposed so that kernels
// can draw once per group of four keys.
FA_HD Philox4 dropout_words(const DropoutParams& d, int64_t b, int64_t h, int64_t heads, int64_t i, int64_t j) {
  Philox4 ctr{uint32_t(j >> 2), uint32_t(i), uint32_t(b * heads + h), uint32_t(d.offset)};
  return philox4x32_10(ctr, uint32_t(d.seed), uint32_t(d.seed >> 32) ^ uint32_t(d.offset >> 32));
}

FA_HD uint32_t philox_word(const Philox4& r, int64_t j) {
  switch (j & 3) {
    case 0:
      return r.x;
    case 1:
      return r.y;
    case 2:
      return r.z;
    default:
      return r.w;
  }
}

// True when attention element (b, h, i, j) is kept (then scaled by 1 / (1 - p)).
FA_HD bool dropout_keep(const DropoutParams& d, int64_t b, int64_t h, int64_t heads, int64_t i, int64_t j) {
  return philox_word(dropout_words(d, b, h, heads, i, j), j) >= dropout_threshold(d.p);
}

}  // namespace flashattn::detail
