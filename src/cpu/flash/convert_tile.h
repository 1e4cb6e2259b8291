#pragma once

// Storage (f32 / f16 / bf16, and fp8_e4m3 for loads) to fp32, 16 elements at a time: the K/V tiles are
// converted once per tile into fp32 strip tiles (microkernel.h) that every query row of the tile then
// reuses.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/common/elem.h"
#include "cpu/flash/tile_config.h"
#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

template <DType DT>
using DTypeTag = std::integral_constant<DType, DT>;

// Calls f(DTypeTag<dt>{}) so that the storage type becomes a compile-time constant of the loops inside.
template <typename F>
decltype(auto) dispatch_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::f16:
      return f(DTypeTag<DType::f16>{});
    case DType::bf16:
      return f(DTypeTag<DType::bf16>{});
    default:
      return f(DTypeTag<DType::f32>{});  // validation admits only the three float types
  }
}

// The storage types of one call's q, k / v and out. One type for all three, but with FP8: q, k, v in
// fp8_e4m3 with a bf16 out (the FP8 forward), or an fp8_e4m3 KV cache beside 16/32-bit q and out.
template <DType Q, DType KV, DType O>
struct Storage {
  static constexpr DType q = Q, kv = KV, out = O;
};

// Calls f(Storage<...>{}) for the storage types of q (dtype) and of k / v (kv_dtype).
template <typename F>
decltype(auto) dispatch_storage(DType dtype, DType kv_dtype, F&& f) {
  if (kv_dtype == DType::fp8_e4m3) {
    switch (dtype) {
      case DType::fp8_e4m3:
        return f(Storage<DType::fp8_e4m3, DType::fp8_e4m3, DType::bf16>{});
      case DType::f16:
        return f(Storage<DType::f16, DType::fp8_e4m3, DType::f16>{});
      case DType::bf16:
        return f(Storage<DType::bf16, DType::fp8_e4m3, DType::bf16>{});
      default:
        return f(Storage<DType::f32, DType::fp8_e4m3, DType::f32>{});
    }
  }
  return dispatch_dtype(dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    return f(Storage<D, D, D>{});
  });
}

#if defined(FLASH_AVX512)
// 16 e4m3 codes (zero-extended to 16 bits) as fp32: the exponent and mantissa bits moved to fp16's places
// give the value over 2^8 (subnormals included, both formats' subnormals being multiples of their smallest
// step), so one fp16 conversion and an exact multiply; S.1111.111, e4m3fn's only NaN, is patched in.
FLASH_INLINE __m512 e4m3x16_to_ps(__m256i w) {
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
  const __m512 f =
      _mm512_mul_ps(_mm512_cvtph_ps(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7))), _mm512_set1_ps(256.0f));
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
  return _mm512_mask_blend_ps(nan, f, _mm512_set1_ps(__builtin_nanf("")));
}
#elif defined(FLASH_AVX2)
namespace avx2 {
// 8 bf16 / f16 / e4m3 codes (zero-extended to 16 bits) as fp32; e4m3 as in the AVX-512 build.
FLASH_INLINE __m256 bf16x8_to_ps(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
FLASH_INLINE __m256 e4m3x8_to_ps(__m128i w) {
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8);
  const __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(sign, _mm_slli_epi16(mag, 7))), _mm256_set1_ps(256.0f));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
  return _mm256_blendv_ps(f, _mm256_set1_ps(__builtin_nanf("")), nan);
}
// Round to nearest even to bf16 (NaNs keep a set quiet bit), in the low 16 bits of each 32-bit lane.
FLASH_INLINE __m256i ps_to_bf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}
}  // namespace avx2
#endif

// Bytes of one storage element.
template <DType DT>
constexpr int64_t elem_bytes() {
  return DT == DType::f32 ? 4 : DT == DType::fp8_e4m3 ? 1 : 2;
}

template <DType DT>
FLASH_INLINE VecF load16(const void* base, int64_t off);

// Elements [off, off + n) of a storage array as fp32 lanes 0..n-1 (n <= 16); the other lanes are 0.
template <DType DT>
FLASH_INLINE VecF load_n(const void* base, int64_t off, int n) {
#if defined(FLASH_AVX512)
  const __mmask16 m = __mmask16((1u << n) - 1u);
  if constexpr (DT == DType::f32) {
    return {_mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + off)};
  } else if constexpr (DT == DType::fp8_e4m3) {
    return {e4m3x16_to_ps(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(base) + off)))};
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + off);
    if constexpr (DT == DType::f16) return {_mm512_cvtph_ps(h)};
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  }
#elif defined(FLASH_AVX2)
  if (n == kLanes) return load16<DT>(base, off);
  // No 8- or 16-bit masked loads in AVX2: the n elements go through a zeroed buffer.
  alignas(32) unsigned char buf[16 * elem_bytes<DT>()] = {};
  std::memcpy(buf, static_cast<const unsigned char*>(base) + off * elem_bytes<DT>(), size_t(n) * elem_bytes<DT>());
  return load16<DT>(buf, 0);
#else
  VecF r = zeros();
  for (int l = 0; l < n; ++l) r.v[l] = load_float(base, off + l, DT);
  return r;
#endif
}

// Elements [off, off + 16) as fp32.
template <DType DT>
FLASH_INLINE VecF load16(const void* base, int64_t off) {
#if defined(FLASH_AVX512)
  if constexpr (DT == DType::f32) {
    return {_mm512_loadu_ps(static_cast<const float*>(base) + off)};
  } else if constexpr (DT == DType::fp8_e4m3) {
    return {e4m3x16_to_ps(_mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + off))))};
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + off));
    if constexpr (DT == DType::f16) return {_mm512_cvtph_ps(h)};
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  }
#elif defined(FLASH_AVX2)
  if constexpr (DT == DType::f32) {
    return load(static_cast<const float*>(base) + off);
  } else if constexpr (DT == DType::fp8_e4m3) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + off));
    return {avx2::e4m3x8_to_ps(_mm_cvtepu8_epi16(bytes)),
            avx2::e4m3x8_to_ps(_mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8)))};
  } else {
    const auto* p = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + off);
    const __m128i lo = _mm_loadu_si128(p), hi = _mm_loadu_si128(p + 1);
    if constexpr (DT == DType::f16) return {_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi)};
    return {avx2::bf16x8_to_ps(lo), avx2::bf16x8_to_ps(hi)};
  }
#else
  return load_n<DT>(base, off, kLanes);
#endif
}

// fp32 lanes 0..n-1 to storage elements [off, off + n), rounded to nearest even (as common/convert.h).
template <DType DT>
FLASH_INLINE void store_n(void* base, int64_t off, VecF x, int n) {
  static_assert(DT != DType::fp8_e4m3, "outputs are 16 or 32 bits (an FP8 call writes bf16)");
#if defined(FLASH_AVX512)
  const __mmask16 m = __mmask16((1u << n) - 1u);
  if constexpr (DT == DType::f32) {
    _mm512_mask_storeu_ps(static_cast<float*>(base) + off, m, x.v);
  } else {
    __m256i h;
    if constexpr (DT == DType::f16) {
      h = _mm512_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // bf16: add 0x7FFF plus the lowest kept bit, truncate; NaNs keep a set quiet bit instead.
      const __m512i u = _mm512_castps_si512(x.v);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      const __m512i rounded =
          _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q);
      const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
      h = _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
    }
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(base) + off, m, h);
  }
#elif defined(FLASH_AVX2)
  alignas(32) unsigned char buf[16 * elem_bytes<DT>()];
  unsigned char* dst = n == kLanes ? static_cast<unsigned char*>(base) + off * elem_bytes<DT>() : buf;
  if constexpr (DT == DType::f32) {
    store(reinterpret_cast<float*>(dst), x);
  } else {
    __m128i lo, hi;
    if constexpr (DT == DType::f16) {
      lo = _mm256_cvtps_ph(x.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      hi = _mm256_cvtps_ph(x.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // packus interleaves the two inputs by 128-bit lane; the permute puts lanes 0..15 back in order.
      const __m256i packed = _mm256_permute4x64_epi64(
          _mm256_packus_epi32(avx2::ps_to_bf16x8(x.lo), avx2::ps_to_bf16x8(x.hi)), _MM_SHUFFLE(3, 1, 2, 0));
      lo = _mm256_castsi256_si128(packed);
      hi = _mm256_extracti128_si256(packed, 1);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst) + 1, hi);
  }
  if (n < kLanes)
    std::memcpy(static_cast<unsigned char*>(base) + off * elem_bytes<DT>(), buf, size_t(n) * elem_bytes<DT>());
#else
  for (int l = 0; l < n; ++l) store_float(base, off + l, DT, x.v[l]);
#endif
}

// A fp32 row times `scale` to storage elements [off, off + dim).
template <DType DT>
FLASH_INLINE void store_row(void* base, int64_t off, const float* row, int64_t dim, float scale) {
  for (int64_t c = 0; c < dim; c += kLanes)
    store_n<DT>(base, off + c, load(row + c) * splat(scale), int(std::min<int64_t>(kLanes, dim - c)));
}

// A row of storage elements [off, off + dim) to fp32 row[0, 16 * strips_of(dim)), zero-padded.
template <DType DT>
FLASH_INLINE void load_row(const void* base, int64_t off, int64_t dim, float* row) {
  for (int64_t c = 0; c < dim; c += kLanes)
    store(row + c, load_n<DT>(base, off + c, int(std::min<int64_t>(kLanes, dim - c))));
}

// One row of `dim` elements into the columns of row `row` of a strip tile (columns dim..16*strips_of(dim)
// are zeroed so that padded columns never carry NaN or denormal garbage into a GEMM).
template <DType DT>
FLASH_INLINE void row_to_strips(const void* base, int64_t off, int64_t dim, float* tile, int64_t ss, int64_t row) {
  int64_t c = 0;
  for (; c + kLanes <= dim; c += kLanes) store(tile + (c / kLanes) * ss + row * kLanes, load16<DT>(base, off + c));
  if (c < dim) store(tile + (c / kLanes) * ss + row * kLanes, load_n<DT>(base, off + c, int(dim - c)));
}

// Rows n of `base` at element offsets offsets[0..n) into rows 0..n-1 of a strip tile.
template <DType DT>
void rows_to_strips(const void* base, const int64_t* offsets, int64_t n, int64_t dim, float* tile, int64_t ss) {
  for (int64_t j = 0; j < n; ++j) row_to_strips<DT>(base, offsets[j], dim, tile, ss, j);
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
