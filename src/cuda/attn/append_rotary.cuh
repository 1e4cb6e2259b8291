#pragma once

// The append + rotary step of flash_attn_with_kvcache on the GPU, one warp per row of head_dim elements:
//   rows [0, B * Sn * Hk): new token t of kv head hk of sequence b, row = (b * Sn + t) * Hk + hk; k_new
//     is rotated at cache position cache_seqlens[b] + t and written with v_new at that position
//     (common/kvcache.h's cache_offset: paged or through cache_batch_idx);
//   rows [B * Sn * Hk, + B * Sq * H) when q_rot is given: query (b, i, h), row = (b * Sq + i) * H + h,
//     rotated at rotary_q_position into row `row` of q_rot, a contiguous (B, Sq, H, D) buffer.
// Rotation in fp32 of the stored 16-bit values, rounded once to the storage type; elements past
// rotary_dim (and V) are copied bit for bit. An FP8 cache stores each new value (rotated or not) divided by
// its (b, hk) descale factor, rounded to e4m3 (nearest even, saturating at +-448: common/convert.h's
// rounding, by CUDA's cuda_fp8.h conversion).
// The kernels are their backends' own (cuda_decode's append_rotary.cu, cuda_sm70's backend.cu and sm_70
// image); this is what they run.

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "api/problem.h"
#include "common/kvcache.h"
#include "cuda/common/elem.cuh"

namespace flashattn::detail::cuda::attn {

inline constexpr int kAppendWarps = 4;

// An element of a cache of type C (T, or uint8_t for e4m3) or of q_rot from the fp32 value x: rounded to
// T, or x / factor rounded to e4m3 (the division correctly rounded, as the reference's).
template <typename C>
__device__ __forceinline__ C to_cache(float x, float factor) {
  if constexpr (std::is_same_v<C, uint8_t>) {
    return C(__nv_cvt_float_to_fp8(__fdiv_rn(x, factor), __NV_SATFINITE, __NV_E4M3));
  } else {
    return from_float<C>(x);
  }
}

// dst = src rotated at position pos (first rotary_dim elements), the rest copied (or quantised, FP8);
// lane-strided.
template <typename T, typename C>
__device__ __forceinline__ void rotate_row(const KVCacheProblem& p, const T* src, C* dst, int64_t pos, int lane,
                                           float factor) {
  const int64_t rot = p.rotary.cos != nullptr ? p.rotary.dim : 0;
  if (rot > 0) {
    const T* cos = static_cast<const T*>(p.rotary.cos) + pos * p.rotary.cos_row_stride;
    const T* sin = static_cast<const T*>(p.rotary.sin) + pos * p.rotary.sin_row_stride;
    for (int64_t pair = lane; pair < rot / 2; pair += 32) {
      int64_t i0, i1;
      rotary_pair(p.rotary, pair, &i0, &i1);
      const float c = to_float(cos[pair]), s = to_float(sin[pair]);
      const float x0 = to_float(src[i0]), x1 = to_float(src[i1]);
      dst[i0] = to_cache<C>(fmaf(x0, c, -x1 * s), factor);
      dst[i1] = to_cache<C>(fmaf(x0, s, x1 * c), factor);
    }
  }
  for (int64_t d = rot + lane; d < p.head_dim; d += 32) {
    if constexpr (std::is_same_v<C, T>)
      dst[d] = src[d];
    else
      dst[d] = to_cache<C>(to_float(src[d]), factor);
  }
}

// The rows of warp `row` (blockIdx.x * kAppendWarps + warp) of the step; C is the cache's element type (T,
// or uint8_t for e4m3).
template <typename T, typename C>
__device__ __forceinline__ void append_rotary_row(const KVCacheProblem& p, T* q_rot, int row, int lane) {
  // Row counts fit in 32 bits (the backend's supports function checks): 32-bit index arithmetic.
  const int kv_rows = int(p.batch * p.seqlen_new * p.heads_k);
  if (row < kv_rows) {
    const int heads_k = int(p.heads_k), seqlen_new = int(p.seqlen_new);
    const int hk = row % heads_k, t = row / heads_k % seqlen_new, b = row / heads_k / seqlen_new;
    const CacheSeq s = cache_seq(p, b);
    const int64_t pos = s.seqlen_before + t;
    const T* k_new = static_cast<const T*>(p.k_new.ptr) + p.k_new.offset(b, t, hk);
    const T* v_new = static_cast<const T*>(p.v_new.ptr) + p.v_new.offset(b, t, hk);
    C* k_dst = static_cast<C*>(p.cache.k) + cache_offset(p.cache, s, b, pos, hk, false);
    C* v_dst = static_cast<C*>(p.cache.v) + cache_offset(p.cache, s, b, pos, hk, true);
    rotate_row(p, k_new, k_dst, pos, lane, p.k_descale.at(b, hk));
    const float v_factor = p.v_descale.at(b, hk);
    for (int64_t d = lane; d < p.head_dim; d += 32) {
      if constexpr (std::is_same_v<C, T>)
        v_dst[d] = v_new[d];
      else
        v_dst[d] = to_cache<C>(to_float(v_new[d]), v_factor);
    }
    return;
  }
  const int r = row - kv_rows;
  if (q_rot == nullptr || r >= p.batch * p.seqlen_q * p.heads) return;
  const int heads = int(p.heads), seqlen_q = int(p.seqlen_q);
  const int h = r % heads, i = r / heads % seqlen_q, b = r / heads / seqlen_q;
  const CacheSeq s = cache_seq(p, b);
  const T* q = static_cast<const T*>(p.q.ptr) + p.q.offset(b, i, h);
  rotate_row(p, q, q_rot + int64_t(r) * p.head_dim, rotary_q_position(p, s, i), lane, 1.0f);
}

}  // namespace flashattn::detail::cuda::attn
