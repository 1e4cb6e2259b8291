#pragma once

// Scalar conversions between fp32 and the 16-bit storage types, bit-exact with IEEE round-to-nearest-even
// (the same results as CUDA's __float2half_rn / __float2bfloat16_rn), and the 8-bit float8 e4m3 ("fn":
// no infinities, one NaN pattern per sign, largest finite 448), usable on host and device.

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace flashattn::detail {

FA_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

FA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

FA_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

FA_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

FA_HD float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    man &= 0x3FFu;
    return bits_float(sign | (uint32_t(127 - 15 - e) << 23) | (man << 13));
  }
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 13));
  return bits_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

FA_HD uint16_t float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint16_t(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {
    // result is subnormal (or zero) in f16: value * 2^24 rounded to an integer
    if (abs < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 - (exp - 127) + 10 + 1 ... aligns to 2^-24 units
    uint32_t rounded = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (rounded & 1u))) ++rounded;
    return uint16_t(sign | rounded);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits (carry may bump the exponent: correct)
  uint32_t v = abs - ((127u - 15u) << 23);
  v += 0xFFFu + ((v >> 13) & 1u);
  return uint16_t(sign | (v >> 13));
}

// float8 e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (m x 2^-9),
// S.1111.111 is NaN; every value is exact in fp32.
FA_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu, man = b & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (exp == 0) return bits_float(sign | float_bits(float(man) * 0.001953125f));  // m x 2^-9
  return bits_float(sign | ((exp + 127u - 7u) << 23) | (man << 20));
}

// fp32 to float8 e4m3fn, round to nearest even, saturating: finite values beyond 448 and infinities become
// +-448 (the convention of FP8 quantisers: a scale slightly off must not turn a value into NaN); NaN stays
// NaN.
FA_HD uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint8_t(sign | 0x7Fu);
  if (abs >= 0x43E80000u) return uint8_t(sign | 0x7Eu);  // >= 464, halfway from 448 to 480: saturate
  const float a = bits_float(abs);
  if (abs < 0x3C800000u) {  // below 2^-6: subnormal range, units of 2^-9 (a x 512 is exact)
    const float units = a * 512.0f;
    uint32_t q = uint32_t(units);
    const float rem = units - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;  // q = 8 is the smallest normal, 0x08: still right
    return uint8_t(sign | q);
  }
  // normal: keep 3 of fp32's 23 mantissa bits, round to nearest even (a carry bumps the exponent: correct)
  uint32_t v = abs - ((127u - 7u) << 23);
  v += 0x7FFFFu + ((v >> 20) & 1u);
  const uint32_t bits = v >> 20;
  return uint8_t(sign | (bits > 0x7Eu ? 0x7Eu : bits));
}

}  // namespace flashattn::detail
