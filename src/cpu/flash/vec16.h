#pragma once

// 16-lane vectors of fp32 and uint32 for the cpu_flash kernels. With AVX-512 (the build passes
// -march=native to src/cpu/flash/*.cpp) each is one zmm register; otherwise a plain array whose loops the
// compiler vectorises for the ISA the build targets. Everything above this header is written once
// against these operations, so the portable build runs the same algorithm.

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
#endif

#define FLASH_INLINE inline __attribute__((always_inline))
#define FLASH_INLINE_LAMBDA __attribute__((always_inline))

namespace flashattn::detail::cpu_flash::FLASH_ISA {

constexpr int kLanes = 16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
// x = n + f with n an integer and |f| <= 1/2; 2^f by its Taylor series to degree 7 (truncation error
// (ln2 / 2)^8 / 8! ~ 5e-9), then 2^n applied exactly by vscalefps.
FLASH_INLINE VecF exp2(VecF x) {
  // The clamps keep n and f finite; vmaxps/vminps return their second operand when either is NaN, so
  // x goes second to carry a NaN through.
  x.v = _mm512_max_ps(_mm512_set1_ps(-151.0f), x.v);
  x.v = _mm512_min_ps(_mm512_set1_ps(129.0f), x.v);
  const __m512 n = _mm512_roundscale_ps(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x.v, n);
  __m512 p = _mm512_set1_ps(1.5252733804059838e-05f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428441e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821576e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return {_mm512_scalef_ps(p, n)};
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
FLASH_INLINE VecF fma(VecF a, VecF b, VecF c) { FLASH_LANEWISE(std::fma(a.v[l], b.v[l], c.v[l])); }
FLASH_INLINE VecF max(VecF a, VecF b) { FLASH_LANEWISE(a.v[l] > b.v[l] ? a.v[l] : b.v[l]); }
FLASH_INLINE VecF abs(VecF a) { FLASH_LANEWISE(std::fabs(a.v[l])); }
FLASH_INLINE VecF select(LaneMask m, VecF yes, VecF no) { FLASH_LANEWISE(((m >> l) & 1u) ? yes.v[l] : no.v[l]); }
FLASH_INLINE VecF exp2(VecF x) { FLASH_LANEWISE(std::exp2(x.v[l])); }
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
