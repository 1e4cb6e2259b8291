#pragma once

// 16-lane vectors of fp32 and uint32 for the cpu_flash kernels. With AVX-512 each is one zmm register;
// with AVX2 + FMA + F16C (x86-64-v3) a pair of ymm registers; otherwise a plain array whose loops the
// compiler vectorises for the ISA the build targets. Everything above this header is written once
// against these operations, so every instruction-set build runs the same algorithm.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

// The AVX-512 path needs the F, BW, VL and DQ subsets (every AVX-512 CPU since Skylake-SP has them).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define FLASH_AVX512 1
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom, GCC bug 105593) wherever
// the intrinsics are inlined; the warning is about the header, not about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// AVX2 with FMA and F16C: every x86-64-v3 CPU (Haswell and later, Zen 1 and later). Spelled out with
// intrinsics rather than left to the array path's auto-vectorisation: the arrays' register block does not
// fit 16 ymm registers and their exp2 is a libm call per lane (bench/NOTES.md has the measurements).
#define FLASH_AVX2 1
#include <immintrin.h>
#endif

#define FLASH_INLINE inline __attribute__((always_inline))
#define FLASH_INLINE_LAMBDA __attribute__((always_inline))

namespace flashattn::detail::cpu_flash::FLASH_ISA {

constexpr int kLanes = 16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// 2^f for |f| <= 1/2: its Taylor series to degree 7 (truncation error (ln2 / 2)^8 / 8! ~ 5e-9), highest degree
// first for Horner's scheme; every build's exp2 evaluates it.
constexpr float kExp2Poly[8] = {
    1.5252733804059838e-05f, 1.5403530393381606e-04f, 1.3333558146428441e-03f, 9.6181291076284772e-03f,
    5.5504108664821576e-02f, 2.4022650695910071e-01f, 6.9314718055994531e-01f, 1.0f};

#if defined(FLASH_AVX512)

struct VecF {
  __m512 v;
};
struct VecU {
  __m512i v;
};
using LaneMask = __mmask16;

FLASH_INLINE VecF load(const float* p) { return {_mm512_loadu_ps(p)}; }
FLASH_INLINE void store(float* p, VecF a) { _mm512_storeu_ps(p, a.v); }
FLASH_INLINE VecF splat(float x) { return {_mm512_set1_ps(x)}; }
FLASH_INLINE VecF zeros() { return {_mm512_setzero_ps()}; }
FLASH_INLINE VecF operator+(VecF a, VecF b) { return {_mm512_add_ps(a.v, b.v)}; }
FLASH_INLINE VecF operator-(VecF a, VecF b) { return {_mm512_sub_ps(a.v, b.v)}; }
FLASH_INLINE VecF operator*(VecF a, VecF b) { return {_mm512_mul_ps(a.v, b.v)}; }
FLASH_INLINE VecF operator/(VecF a, VecF b) { return {_mm512_div_ps(a.v, b.v)}; }
// a * b + c
FLASH_INLINE VecF fma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
FLASH_INLINE VecF max(VecF a, VecF b) { return {_mm512_max_ps(a.v, b.v)}; }
FLASH_INLINE VecF abs(VecF a) { return {_mm512_abs_ps(a.v)}; }
// Lanes of `m` take `yes`, the others `no`.
FLASH_INLINE VecF select(LaneMask m, VecF yes, VecF no) { return {_mm512_mask_blend_ps(m, no.v, yes.v)}; }
FLASH_INLINE LaneMask equal(VecF a, VecF b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ); }
FLASH_INLINE LaneMask less(VecF a, VecF b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ); }
FLASH_INLINE float reduce_max(VecF a) { return _mm512_reduce_max_ps(a.v); }
FLASH_INLINE float reduce_add(VecF a) { return _mm512_reduce_add_ps(a.v); }

FLASH_INLINE VecU load(const uint32_t* p) { return {_mm512_loadu_si512(p)}; }
FLASH_INLINE VecU load(const int32_t* p) { return {_mm512_loadu_si512(p)}; }
FLASH_INLINE VecU splat_u(uint32_t x) { return {_mm512_set1_epi32(int(x))}; }
FLASH_INLINE VecU operator+(VecU a, VecU b) { return {_mm512_add_epi32(a.v, b.v)}; }
FLASH_INLINE VecU operator-(VecU a, VecU b) { return {_mm512_sub_epi32(a.v, b.v)}; }
FLASH_INLINE VecU operator^(VecU a, VecU b) { return {_mm512_xor_si512(a.v, b.v)}; }
// Signed 32-bit comparisons (key and query indices).
FLASH_INLINE LaneMask less_i(VecU a, VecU b) { return _mm512_cmp_epi32_mask(a.v, b.v, _MM_CMPINT_LT); }
FLASH_INLINE LaneMask greater_equal_u(VecU a, VecU b) { return _mm512_cmp_epu32_mask(a.v, b.v, _MM_CMPINT_NLT); }
// |a| of signed lanes, converted to float.
FLASH_INLINE VecF abs_to_float(VecU a) { return {_mm512_cvtepi32_ps(_mm512_abs_epi32(a.v))}; }

// Low and high 32 bits of the 64-bit products a * b per lane (the Philox multiply).
FLASH_INLINE void mul_hi_lo(VecU a, VecU b, VecU* hi, VecU* lo) {
  const __m512i even = _mm512_mul_epu32(a.v, b.v);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a.v, 32), _mm512_srli_epi64(b.v, 32));
  lo->v = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi->v = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// Lane j of the result is the sum of all lanes of a[j]: sixteen dot products finished at once. Pairs,
// then quadruples are combined within 128-bit blocks (unpack + add), then the four blocks are transposed
// and added (45 instructions instead of 16 full horizontal reductions).
FLASH_INLINE VecF transpose_sum16(const VecF* a) {
  __m512 pair[8];
  for (int k = 0; k < 8; ++k)
    pair[k] =
        _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k].v, a[2 * k + 1].v), _mm512_unpackhi_ps(a[2 * k].v, a[2 * k + 1].v));
  __m512 quad[4];
  for (int k = 0; k < 4; ++k) {
    const __m512d x = _mm512_castps_pd(pair[2 * k]), y = _mm512_castps_pd(pair[2 * k + 1]);
    quad[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // quad[k] block b holds partial sums of a[4k .. 4k+3] over block b of the inputs.
  const __m512 h01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(quad[0], quad[1], 0x44), _mm512_shuffle_f32x4(quad[0], quad[1], 0xEE));
  const __m512 h23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(quad[2], quad[3], 0x44), _mm512_shuffle_f32x4(quad[2], quad[3], 0xEE));
  return {_mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xDD))};
}

// In-place transpose of a 16 x 16 block held as 16 row vectors: r[i].lane(j) <-> r[j].lane(i).
// Three rounds of two-input shuffles (32-bit, 64-bit, then 128-bit blocks twice): 64 instructions.
FLASH_INLINE void transpose16(VecF* r) {
  __m512 t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k].v, r[2 * k + 1].v);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k].v, r[2 * k + 1].v);
  }
  __m512 u[16];
  for (int k = 0; k < 4; ++k)
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[4 * k + h]), b = _mm512_castps_pd(t[4 * k + 2 + h]);
      u[4 * k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[4 * k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // u[4k + c] holds columns c, c+4, c+8, c+12 (one per 128-bit block) of rows 4k..4k+3.
  __m512 v[16];
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    v[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    v[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    v[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c].v = _mm512_shuffle_f32x4(v[c], v[8 + c], 0x88);
    r[8 + c].v = _mm512_shuffle_f32x4(v[c], v[8 + c], 0xDD);
    r[4 + c].v = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0x88);
    r[12 + c].v = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0xDD);
  }
}

// 2^x with |relative error| < 2^-23 on [-150, 128]; x below -150 gives 0 (so exp2(-inf) == 0), x above
// 128 gives inf (so exp2(inf) == inf), and NaN gives NaN (a NaN score must reach the output, not vanish).
// x = n + f with n an integer and |f| <= 1/2; 2^f by kExp2Poly, then 2^n applied exactly by vscalefps.
FLASH_INLINE VecF exp2(VecF x) {
  // The clamps keep n and f finite; vmaxps/vminps return their second operand when either is NaN, so
  // x goes second to carry a NaN through.
  x.v = _mm512_max_ps(_mm512_set1_ps(-151.0f), x.v);
  x.v = _mm512_min_ps(_mm512_set1_ps(129.0f), x.v);
  const __m512 n = _mm512_roundscale_ps(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x.v, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[i]));
  return {_mm512_scalef_ps(p, n)};
}

#elif defined(FLASH_AVX2)

// Lanes 0..7 in `lo`, 8..15 in `hi`.
struct VecF {
  __m256 lo, hi;
};
struct VecU {
  __m256i lo, hi;
};
using LaneMask = uint32_t;  // bit l set: lane l

namespace avx2 {
// Lanes l of an 8-lane all-ones / all-zeros mask whose bit l of `bits` is set.
FLASH_INLINE __m256 mask_of_bits(uint32_t bits) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i picked = _mm256_and_si256(_mm256_set1_epi32(int(bits)), lane_bit);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(picked, lane_bit));
}
FLASH_INLINE LaneMask bits_of(__m256 lo, __m256 hi) {
  return LaneMask(_mm256_movemask_ps(lo)) | (LaneMask(_mm256_movemask_ps(hi)) << 8);
}
FLASH_INLINE float hmax8(__m256 a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
FLASH_INLINE float hadd8(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// In-place transpose of an 8 x 8 block held as 8 row vectors (24 shuffles).
FLASH_INLINE void transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * k + h], b = t[4 * k + 2 + h];
      u[4 * k + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * k + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
  // u[c] (c < 4) holds columns c and c + 4 of rows 0..3 (one per 128-bit half), u[4 + c] of rows 4..7.
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}
// 2^n for integer-valued n in [-126, 127], built from its exponent bits.
FLASH_INLINE __m256 pow2i(__m256 n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
FLASH_INLINE __m256 exp2_8(__m256 x) {
  // As the AVX-512 exp2 above in structure: clamps with x second to carry a NaN through, n = round(x),
  // the degree-7 polynomial of 2^f, then 2^n applied as two exact powers 2^n1 * 2^n2 (n1 = floor(n / 2)):
  // p * 2^n1 is exact and normal for every n in [-151, 129], so the one rounding is the last product's,
  // as vscalefps rounds once (subnormal results, 0 below 2^-150, inf above 2^128).
  x = _mm256_max_ps(_mm256_set1_ps(-151.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(129.0f), x);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Poly[i]));
  const __m256 n1 = _mm256_floor_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)));
  const __m256 n2 = _mm256_sub_ps(n, n1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2));
}
FLASH_INLINE void mul_hi_lo8(__m256i a, __m256i b, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, b);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32));
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
}  // namespace avx2

#define FLASH_AVX2_HALVES(f) \
  { f(a.lo, b.lo), f(a.hi, b.hi) }

FLASH_INLINE VecF load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
FLASH_INLINE void store(float* p, VecF a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
FLASH_INLINE VecF splat(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
FLASH_INLINE VecF zeros() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
FLASH_INLINE VecF operator+(VecF a, VecF b) { return FLASH_AVX2_HALVES(_mm256_add_ps); }
FLASH_INLINE VecF operator-(VecF a, VecF b) { return FLASH_AVX2_HALVES(_mm256_sub_ps); }
FLASH_INLINE VecF operator*(VecF a, VecF b) { return FLASH_AVX2_HALVES(_mm256_mul_ps); }
FLASH_INLINE VecF operator/(VecF a, VecF b) { return FLASH_AVX2_HALVES(_mm256_div_ps); }
// a * b + c
FLASH_INLINE VecF fma(VecF a, VecF b, VecF c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
// vmaxps returns its second operand when either is NaN, as the other builds' max does.
FLASH_INLINE VecF max(VecF a, VecF b) { return FLASH_AVX2_HALVES(_mm256_max_ps); }
FLASH_INLINE VecF abs(VecF a) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  return {_mm256_andnot_ps(sign, a.lo), _mm256_andnot_ps(sign, a.hi)};
}
// Lanes of `m` take `yes`, the others `no`.
FLASH_INLINE VecF select(LaneMask m, VecF yes, VecF no) {
  return {_mm256_blendv_ps(no.lo, yes.lo, avx2::mask_of_bits(m & 0xFFu)),
          _mm256_blendv_ps(no.hi, yes.hi, avx2::mask_of_bits(m >> 8))};
}
FLASH_INLINE LaneMask equal(VecF a, VecF b) {
  return avx2::bits_of(_mm256_cmp_ps(a.lo, b.lo, _CMP_EQ_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_EQ_OQ));
}
FLASH_INLINE LaneMask less(VecF a, VecF b) {
  return avx2::bits_of(_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ));
}
FLASH_INLINE float reduce_max(VecF a) { return avx2::hmax8(_mm256_max_ps(a.lo, a.hi)); }
FLASH_INLINE float reduce_add(VecF a) { return avx2::hadd8(_mm256_add_ps(a.lo, a.hi)); }
FLASH_INLINE VecF exp2(VecF x) { return {avx2::exp2_8(x.lo), avx2::exp2_8(x.hi)}; }

FLASH_INLINE VecU load(const uint32_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
}
FLASH_INLINE VecU load(const int32_t* p) { return load(reinterpret_cast<const uint32_t*>(p)); }
FLASH_INLINE VecU splat_u(uint32_t x) { return {_mm256_set1_epi32(int(x)), _mm256_set1_epi32(int(x))}; }
FLASH_INLINE VecU operator+(VecU a, VecU b) { return FLASH_AVX2_HALVES(_mm256_add_epi32); }
FLASH_INLINE VecU operator-(VecU a, VecU b) { return FLASH_AVX2_HALVES(_mm256_sub_epi32); }
FLASH_INLINE VecU operator^(VecU a, VecU b) { return FLASH_AVX2_HALVES(_mm256_xor_si256); }
// Signed 32-bit comparisons (key and query indices).
FLASH_INLINE LaneMask less_i(VecU a, VecU b) {
  return avx2::bits_of(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b.lo, a.lo)),
                       _mm256_castsi256_ps(_mm256_cmpgt_epi32(b.hi, a.hi)));
}
FLASH_INLINE LaneMask greater_equal_u(VecU a, VecU b) {
  return avx2::bits_of(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(a.lo, b.lo), a.lo)),
                       _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(a.hi, b.hi), a.hi)));
}
// |a| of signed lanes, converted to float.
FLASH_INLINE VecF abs_to_float(VecU a) {
  return {_mm256_cvtepi32_ps(_mm256_abs_epi32(a.lo)), _mm256_cvtepi32_ps(_mm256_abs_epi32(a.hi))};
}
// Low and high 32 bits of the 64-bit products a * b per lane (the Philox multiply).
FLASH_INLINE void mul_hi_lo(VecU a, VecU b, VecU* hi, VecU* lo) {
  avx2::mul_hi_lo8(a.lo, b.lo, &hi->lo, &lo->lo);
  avx2::mul_hi_lo8(a.hi, b.hi, &hi->hi, &lo->hi);
}
#undef FLASH_AVX2_HALVES

// In-place transpose of a 16 x 16 block held as 16 row vectors: four 8 x 8 transposes, the two
// off-diagonal blocks trading places.
FLASH_INLINE void transpose16(VecF* r) {
  __m256 top_left[8], top_right[8], bottom_left[8], bottom_right[8];
  for (int i = 0; i < 8; ++i) {
    top_left[i] = r[i].lo;
    top_right[i] = r[i].hi;
    bottom_left[i] = r[8 + i].lo;
    bottom_right[i] = r[8 + i].hi;
  }
  avx2::transpose8(top_left);
  avx2::transpose8(top_right);
  avx2::transpose8(bottom_left);
  avx2::transpose8(bottom_right);
  for (int i = 0; i < 8; ++i) {
    r[i] = {top_left[i], bottom_left[i]};
    r[8 + i] = {top_right[i], bottom_right[i]};
  }
}

// Lane j of the result is the sum of all lanes of a[j]: each vector's halves added, then two 8 x 8
// transposes turn the sixteen horizontal sums into vertical ones.
FLASH_INLINE VecF transpose_sum16(const VecF* a) {
  __m256 first[8], second[8];
  for (int j = 0; j < 8; ++j) {
    first[j] = _mm256_add_ps(a[j].lo, a[j].hi);
    second[j] = _mm256_add_ps(a[8 + j].lo, a[8 + j].hi);
  }
  avx2::transpose8(first);
  avx2::transpose8(second);
  for (int step = 4; step > 0; step /= 2)
    for (int j = 0; j < step; ++j) {
      first[j] = _mm256_add_ps(first[j], first[j + step]);
      second[j] = _mm256_add_ps(second[j], second[j + step]);
    }
  return {first[0], second[0]};
}

#else  // portable: 16-element arrays

struct VecF {
  float v[kLanes];
};
struct VecU {
  uint32_t v[kLanes];
};
using LaneMask = uint32_t;  // bit l set: lane l

#define FLASH_LANEWISE(expr)                      \
  VecF r;                                         \
  for (int l = 0; l < kLanes; ++l) r.v[l] = expr; \
  return r

FLASH_INLINE VecF load(const float* p) {
  VecF r;
  std::memcpy(r.v, p, sizeof(r.v));
  return r;
}
FLASH_INLINE void store(float* p, VecF a) { std::memcpy(p, a.v, sizeof(a.v)); }
FLASH_INLINE VecF splat(float x) { FLASH_LANEWISE(x); }
FLASH_INLINE VecF zeros() { return splat(0.0f); }
FLASH_INLINE VecF operator+(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] + b.v[l]); }
FLASH_INLINE VecF operator-(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] - b.v[l]); }
FLASH_INLINE VecF operator*(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] * b.v[l]); }
FLASH_INLINE VecF operator/(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] / b.v[l]); }
// Fused where the target has an FMA instruction; on baseline x86-64 (SSE2) std::fma is a libm call per lane,
// far slower than the multiply and add it is there.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA) || defined(__aarch64__)
FLASH_INLINE VecF fma(VecF a, VecF b, VecF c) { FLASH_LANEWISE(std::fma(a.v[l], b.v[l], c.v[l])); }
#else
FLASH_INLINE VecF fma(VecF a, VecF b, VecF c) { FLASH_LANEWISE(a.v[l] * b.v[l] + c.v[l]); }
#endif
FLASH_INLINE VecF max(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] > b.v[l] ? a.v[l] : b.v[l]); }
FLASH_INLINE VecF abs(VecF a) { FLASH_LANEWISE(std::fabs(a.v[l])); }
FLASH_INLINE VecF select(LaneMask m, VecF yes, VecF no) { FLASH_LANEWISE(((m >> l) & 1u) ? yes.v[l] : no.v[l]); }
// The AVX builds' exp2 (same clamps, polynomial and two-step scaling), written with operations the
// compiler vectorises on any target: round to nearest by adding and subtracting 1.5 * 2^23 (exact for
// |x| < 2^22), the powers of two from their exponent bits. std::exp2 per lane is a libm call.
FLASH_INLINE VecF exp2(VecF x) {
  VecF r;
  for (int l = 0; l < kLanes; ++l) {
    float xl = x.v[l];
    xl = xl > -151.0f ? xl : (xl == xl ? -151.0f : xl);
    xl = xl < 129.0f ? xl : (xl == xl ? 129.0f : xl);
    const float n = (xl + 12582912.0f) - 12582912.0f;
    const float f = xl - n;
    float p = kExp2Poly[0];
    for (int i = 1; i < 8; ++i) p = p * f + kExp2Poly[i];
    const int32_t ni = xl == xl ? int32_t(n) : 0;
    const int32_t n1 = ni >> 1, n2 = ni - n1;  // n1 = floor(n / 2)
    r.v[l] = p * std::bit_cast<float>(uint32_t(n1 + 127) << 23) * std::bit_cast<float>(uint32_t(n2 + 127) << 23);
  }
  return r;
}
FLASH_INLINE void transpose16(VecF* r) {
  for (int i = 0; i < kLanes; ++i)
    for (int j = i + 1; j < kLanes; ++j) std::swap(r[i].v[j], r[j].v[i]);
}
FLASH_INLINE VecF transpose_sum16(const VecF* a) {
  VecF r;
  for (int j = 0; j < kLanes; ++j) {
    float s = 0;
    for (int l = 0; l < kLanes; ++l) s += a[j].v[l];
    r.v[j] = s;
  }
  return r;
}
FLASH_INLINE VecF abs_to_float(VecU a) { FLASH_LANEWISE(float(std::abs(int64_t(int32_t(a.v[l]))))); }
#undef FLASH_LANEWISE

template <typename Pred>
FLASH_INLINE LaneMask mask_of(Pred pred) {
  LaneMask m = 0;
  for (int l = 0; l < kLanes; ++l) m |= LaneMask(pred(l) ? 1u : 0u) << l;
  return m;
}
FLASH_INLINE LaneMask equal(VecF a, VecF b) {
  return mask_of([&](int l) { return a.v[l] == b.v[l]; });
}
FLASH_INLINE LaneMask less(VecF a, VecF b) {
  return mask_of([&](int l) { return a.v[l] < b.v[l]; });
}
FLASH_INLINE float reduce_max(VecF a) {
  float m = a.v[0];
  for (int l = 1; l < kLanes; ++l) m = a.v[l] > m ? a.v[l] : m;
  return m;
}
FLASH_INLINE float reduce_add(VecF a) {
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += a.v[l];
  return s;
}

FLASH_INLINE VecU load(const uint32_t* p) {
  VecU r;
  std::memcpy(r.v, p, sizeof(r.v));
  return r;
}
FLASH_INLINE VecU load(const int32_t* p) {
  VecU r;
  std::memcpy(r.v, p, sizeof(r.v));
  return r;
}
FLASH_INLINE VecU splat_u(uint32_t x) {
  VecU r;
  for (int l = 0; l < kLanes; ++l) r.v[l] = x;
  return r;
}
FLASH_INLINE VecU operator+(VecU a, VecU b) {
  for (int l = 0; l < kLanes; ++l) a.v[l] += b.v[l];
  return a;
}
FLASH_INLINE VecU operator-(VecU a, VecU b) {
  for (int l = 0; l < kLanes; ++l) a.v[l] -= b.v[l];
  return a;
}
FLASH_INLINE VecU operator^(VecU a, VecU b) {
  for (int l = 0; l < kLanes; ++l) a.v[l] ^= b.v[l];
  return a;
}
FLASH_INLINE LaneMask less_i(VecU a, VecU b) {
  return mask_of([&](int l) { return int32_t(a.v[l]) < int32_t(b.v[l]); });
}
FLASH_INLINE LaneMask greater_equal_u(VecU a, VecU b) {
  return mask_of([&](int l) { return a.v[l] >= b.v[l]; });
}
FLASH_INLINE void mul_hi_lo(VecU a, VecU b, VecU* hi, VecU* lo) {
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t prod = uint64_t(a.v[l]) * uint64_t(b.v[l]);
    hi->v[l] = uint32_t(prod >> 32);
    lo->v[l] = uint32_t(prod);
  }
}

#endif

FLASH_INLINE VecF neg_infinity() { return splat(-INFINITY); }

// tanh with a few ulp of error (softcap). |x| < 1/2: the Taylor series of tanh to x^19 (the next term
// is < 5e-10 there); otherwise 1 - 2 / (e^{2|x|} + 1), whose cancellation costs at most ~2 ulp once
// tanh(x) > 0.46. Large |x| gives e = inf and exactly +-1.
FLASH_INLINE VecF tanh(VecF x) {
  const VecF ax = abs(x);
  const VecF z = x * x;
  VecF p = splat(-2.3912911424355248e-04f);
  p = fma(p, z, splat(5.9002744094558600e-04f));
  p = fma(p, z, splat(-1.4558343870513183e-03f));
  p = fma(p, z, splat(3.5921280365724810e-03f));
  p = fma(p, z, splat(-8.8632355299021966e-03f));
  p = fma(p, z, splat(2.1869488536155203e-02f));
  p = fma(p, z, splat(-5.3968253968253971e-02f));
  p = fma(p, z, splat(1.3333333333333333e-01f));
  p = fma(p, z, splat(-3.3333333333333333e-01f));
  const VecF small = fma(p * z, x, x);
  const VecF e = exp2(ax * splat(2.0f * kLog2e));
  const VecF big = splat(1.0f) - splat(2.0f) / (e + splat(1.0f));
  const VecF signed_big = select(less(x, zeros()), zeros() - big, big);
  return select(less(ax, splat(0.5f)), small, signed_big);
}

// The vectorised Philox4x32-10 of common/philox.h on 16 independent counters (same rounds, same
// constants): lane l of the results is philox4x32_10({x[l], y[l], z[l], w[l]}, key0, key1).
struct Philox16 {
  VecU x, y, z, w;
};

FLASH_INLINE Philox16 philox16(Philox16 c, uint32_t key0, uint32_t key1) {
  const VecU mul0 = splat_u(0xD2511F53u), mul1 = splat_u(0xCD9E8D57u);
  for (int round = 0; round < 10; ++round) {
    VecU hi0, lo0, hi1, lo1;
    mul_hi_lo(mul0, c.x, &hi0, &lo0);
    mul_hi_lo(mul1, c.z, &hi1, &lo1);
    c = Philox16{hi1 ^ c.y ^ splat_u(key0), lo1, hi0 ^ c.w ^ splat_u(key1), lo0};
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return c;
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
