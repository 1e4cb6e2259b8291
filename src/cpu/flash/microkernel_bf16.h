#pragma once

// The bf16 GEMM of cpu_flash on AVX-512 BF16 (vdpbf16ps): C (fp32) op= A B with A and B in bf16, for
// bf16 inputs in builds with -mavx512bf16 (FLASH_AVX512_BF16). It has the register blocking and the C
// layout of microkernel.h, but the K dimension is walked in *pairs*: a word (32 bits) holds two bf16
// values, element 2p in its low half and 2p + 1 in its high half, and one vdpbf16ps adds both products
// of a pair into each of 16 fp32 lanes (twice the multiplies of an FMA per instruction).
//   B: a strip tile of words, pair p of column c at b + (c / 16) * ss + p * 16 + c % 16
//   A: ALayout::rows:        pair p of row r at a + r * a_stride + p  (a row-major bf16 matrix as words)
//      ALayout::transposed:  pair p of row r at a + p * a_stride + r
// vdpbf16ps treats bf16 denormals as zero and rounds once per product pair (docs/cpu_flash.md, "Numerics").

#include <algorithm>
#include <cstdint>

#include "cpu/flash/microkernel.h"
#include "cpu/flash/tile_config.h"
#include "cpu/flash/vec16.h"

#if defined(FLASH_AVX512) && defined(__AVX512BF16__)
#define FLASH_AVX512_BF16 1

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// One MR x (16 NV) block of C over k_pairs pairs. With CInit::zero the result is scaled by out_scale.
template <int MR, int NV, ALayout AL, CInit CI>
void micro_kernel_bf16(const uint32_t* a, int64_t a_stride, const uint32_t* b, int64_t b_ss, float* c, int64_t c_ss,
                       int64_t k_pairs, const float* col_scale, float out_scale) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      if constexpr (CI == CInit::zero) {
        acc[r][v] = _mm512_setzero_ps();
      } else if constexpr (CI == CInit::load) {
        acc[r][v] = _mm512_loadu_ps(c + v * c_ss + r * kLanes);
      } else {
        acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(c + v * c_ss + r * kLanes), _mm512_loadu_ps(col_scale + v * kLanes));
      }
    }
#pragma GCC unroll 4
  for (int64_t p = 0; p < k_pairs; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * b_ss + p * kLanes);
    for (int r = 0; r < MR; ++r) {
      const uint32_t w = AL == ALayout::rows ? a[r * a_stride + p] : a[p * a_stride + r];
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(int(w));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      __m512 x = acc[r][v];
      if constexpr (CI == CInit::zero) x = _mm512_mul_ps(x, _mm512_set1_ps(out_scale));
      _mm512_storeu_ps(c + v * c_ss + r * kLanes, x);
    }
}

template <ALayout AL, CInit CI>
using MicroKernelBf16Fn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int64_t,
                                   const float*, float);

template <ALayout AL, CInit CI, int... Rows>
struct MicroKernelBf16Table {
  static constexpr MicroKernelBf16Fn<AL, CI> fns[kMicroRows][kMicroStrips] = {
      {micro_kernel_bf16<Rows, 1, AL, CI>, micro_kernel_bf16<Rows, 2, AL, CI>, micro_kernel_bf16<Rows, 3, AL, CI>}...};
};

// C (M rows x n_strips strips) op= A (M x 2 k_pairs) B (2 k_pairs x n_strips strips), the loop order of gemm().
template <ALayout AL, CInit CI>
void gemm_bf16(int64_t M, int64_t n_strips, int64_t k_pairs, const uint32_t* a, int64_t a_stride, const uint32_t* b,
               int64_t b_ss, float* c, int64_t c_ss, const float* col_scale, float out_scale) {
  using Table = MicroKernelBf16Table<AL, CI, 1, 2, 3, 4, 5, 6, 7, 8>;
  for (int64_t nb = 0; nb < n_strips; nb += kMicroStrips) {
    const int nv = int(std::min<int64_t>(kMicroStrips, n_strips - nb));
    for (int64_t m0 = 0; m0 < M; m0 += kMicroRows) {
      const int mr = int(std::min<int64_t>(kMicroRows, M - m0));
      const uint32_t* a_block = AL == ALayout::rows ? a + m0 * a_stride : a + m0;
      Table::fns[mr - 1][nv - 1](a_block, a_stride, b + nb * b_ss, b_ss, c + nb * c_ss + m0 * kLanes, c_ss, k_pairs,
                                 col_scale ? col_scale + nb * kLanes : nullptr, out_scale);
    }
  }
}

// Word l: the bf16 roundings (to nearest even, as the GPU kernels round P) of even[l] (low half) and
// odd[l] (high half): one pair row of a B tile from two fp32 rows with columns in lanes.
FLASH_INLINE __m512i pair_words(VecF even, VecF odd) {
  const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(odd.v, even.v);  // bf16 0..15: even, 16..31: odd
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, halves);
}

// The 16 lanes of x rounded to bf16 (nearest even) as 8 words, lanes 2i and 2i + 1 in word i: a strip
// row paired along its lanes (the A operand of dV += P^T dO and dK += dS^T Q pairs query rows).
FLASH_INLINE __m256i lane_pair_words(VecF x) { return (__m256i)_mm512_cvtneps_pbh(x.v); }

// Rows 2u and 2u + 1 (u < ceil(n / 2)) of a strip (16 lanes, row stride 16 floats) as the pair rows
// dst + u * pair_stride (16 words each, pair_words); the second row of an odd n is zero.
inline void pack_row_pairs(const float* strip, int64_t n, uint32_t* dst, int64_t pair_stride) {
  for (int64_t u = 0; 2 * u < n; ++u)
    _mm512_storeu_si512(
        dst + u * pair_stride,
        pair_words(load(strip + 2 * u * kLanes), 2 * u + 1 < n ? load(strip + (2 * u + 1) * kLanes) : zeros()));
}

// Keys 2u and 2u + 1 of a bf16 K/V tile (rows at element offsets off[0..n) of base) as the words
// (x[2u][d], x[2u + 1][d]) at dst[u * pair_stride + (d / 16) * strip_stride + d % 16]: with
// (dim, 16) the A operand of O^T = V^T P^T (transposed layout), with (16, strip stride) the B operand of
// dQ += dS K (a strip tile of key pairs). The second key of an odd n is zero.
inline void pack_key_pairs(const void* base, const int64_t* off, int64_t n, int64_t dim, uint32_t* dst,
                           int64_t pair_stride, int64_t strip_stride) {
  const uint16_t* x = static_cast<const uint16_t*>(base);
  // unpacklo/hi interleave within 128-bit blocks: block L of lo holds d = 8L..8L+3, of hi 8L+4..8L+7.
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int64_t u = 0; 2 * u < n; ++u) {
    const uint16_t* r0 = x + off[2 * u];
    const uint16_t* r1 = 2 * u + 1 < n ? x + off[2 * u + 1] : nullptr;
    for (int64_t d = 0; d < dim; d += 32) {
      const int m = int(std::min<int64_t>(32, dim - d));
      const __mmask32 k = m == 32 ? __mmask32(~0u) : __mmask32((1u << m) - 1u);
      const __m512i a = _mm512_maskz_loadu_epi16(k, r0 + d);
      const __m512i b = r1 ? _mm512_maskz_loadu_epi16(k, r1 + d) : _mm512_setzero_si512();
      const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
      uint32_t* out = dst + u * pair_stride + (d / kLanes) * strip_stride;
      _mm512_mask_storeu_epi32(out, __mmask16((1u << std::min(m, 16)) - 1u), _mm512_permutex2var_epi64(lo, first, hi));
      if (m > 16)
        _mm512_mask_storeu_epi32(out + strip_stride, __mmask16((1u << (m - 16)) - 1u),
                                 _mm512_permutex2var_epi64(lo, second, hi));
    }
  }
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA

#endif
