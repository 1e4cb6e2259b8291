// forward_kvcache(): append k_new/v_new into the cache (rotating the new keys), then attend with the
// shared engines over the cache, paged or contiguous. Positions and rotary rules: common/kvcache.h.

#include "common/kvcache.h"

#include <cstring>
#include <vector>

#include "cpu/common/elem.h"
#include "cpu/flash/engines.h"
#include "cpu/flash/entry.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

// New token t of (b, hk) goes to cache position seqlen_before + t. V (and K without rotary) is copied
// bit for bit; a rotated key is rotated in fp32 and rounded once to the cache dtype. An FP8 cache stores
// each value over its (b, hk) factor, rounded to e4m3 (common/convert.h): float division of the stored
// 16/32-bit value is the exactly rounded quotient, as the reference's.
void append_new_tokens(const KVCacheProblem& p) {
  const int64_t D = p.head_dim, elem = dtype_size(p.dtype);
  const bool rotary = p.rotary.cos != nullptr, fp8 = p.cache_dtype != p.dtype;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t hk = 0; hk < p.heads_k; ++hk) {
      const CacheSeq s = cache_seq(p, b);
      const float kd = p.k_descale.at(b, hk), vd = p.v_descale.at(b, hk);
      std::vector<float> row(rotary || fp8 ? size_t(D) : 0);
      // One row of `src` at offset `from` (as loaded, maybe rotated, in `row`) to the cache at `to`.
      const auto store = [&](void* cache, int64_t to, const void* src, int64_t from, bool loaded, float factor) {
        if (!fp8 && !loaded) {
          std::memcpy(static_cast<char*>(cache) + to * elem, static_cast<const char*>(src) + from * elem,
                      size_t(D * elem));
          return;
        }
        for (int64_t d = 0; d < D; ++d) {
          const float x = loaded ? row[size_t(d)] : load_float(src, from + d, p.dtype);
          store_float(cache, to + d, p.cache_dtype, fp8 ? x / factor : x);
        }
      };
      for (int64_t t = 0; t < p.seqlen_new; ++t) {
        const int64_t pos = s.seqlen_before + t;
        const int64_t k_src = p.k_new.offset(b, t, hk), v_src = p.v_new.offset(b, t, hk);
        store(p.cache.v, cache_offset(p.cache, s, b, pos, hk, true), p.v_new.ptr, v_src, false, vd);
        if (rotary) {
          for (int64_t d = 0; d < D; ++d) row[size_t(d)] = load_float(p.k_new.ptr, k_src + d, p.dtype);
          for (int64_t pair = 0; pair < p.rotary.dim / 2; ++pair) {
            const float c = load_float(p.rotary.cos, pos * p.rotary.cos_row_stride + pair, p.dtype);
            const float sn = load_float(p.rotary.sin, pos * p.rotary.sin_row_stride + pair, p.dtype);
            int64_t i0, i1;
            rotary_pair(p.rotary, pair, &i0, &i1);
            const float x0 = row[size_t(i0)], x1 = row[size_t(i1)];
            row[size_t(i0)] = x0 * c - x1 * sn;
            row[size_t(i1)] = x0 * sn + x1 * c;
          }
        }
        store(p.cache.k, cache_offset(p.cache, s, b, pos, hk, false), p.k_new.ptr, k_src, rotary, kd);
      }
    }
  }
}

AttnSeq cache_job(const KVCacheProblem& p, int64_t b, int64_t hk) {
  const CacheSeq cs = cache_seq(p, b);
  const CacheView& cv = p.cache;
  AttnSeq s;
  s.b = b;
  s.hk = hk;
  s.sq = p.seqlen_q;
  s.sk = cs.seqlen_k;
  s.q = p.q.ptr;
  s.q_start = p.q.offset(b, 0, 0);
  s.q_row_stride = p.q.row_stride;
  s.q_head_stride = p.q.head_stride;
  s.out = p.out.ptr;
  s.out_start = p.out.offset(b, 0, 0);
  s.out_row_stride = p.out.row_stride;
  s.out_head_stride = p.out.head_stride;
  if (p.lse.ptr) {
    s.lse = p.lse.ptr + p.lse.offset(b, 0, 0);
    s.lse_head_stride = p.lse.head_stride;
  }
  KeyRows& k = s.keys;
  k.k = cv.k;
  k.v = cv.v;
  k.k_row_stride = cv.k_row_stride;
  k.v_row_stride = cv.v_row_stride;
  if (cv.paged()) {
    k.block_table = cv.block_table + b * cv.block_table_stride;
    k.page_size = cv.page_size;
    k.first = cs.leftpad;
    k.k_block_stride = cv.k_batch_stride;
    k.v_block_stride = cv.v_batch_stride;
    k.k_start = hk * cv.k_head_stride;
    k.v_start = hk * cv.v_head_stride;
  } else {
    k.k_start = cs.cache_row * cv.k_batch_stride + cs.leftpad * cv.k_row_stride + hk * cv.k_head_stride;
    k.v_start = cs.cache_row * cv.v_batch_stride + cs.leftpad * cv.v_row_stride + hk * cv.v_head_stride;
  }
  s.score_factor = p.k_descale.at(b, hk);
  s.out_factor = p.v_descale.at(b, hk);
  s.rotary_pos0 = cs.seqlen_before;
  s.rotary_consecutive = rotary_q_consecutive(p.score);
  return s;
}

}  // namespace

void forward_kvcache(const KVCacheProblem& p, Stream) {
  AttnCall c = make_call(p.dtype, p.heads, p.heads_k, p.head_dim, p.score, DropoutParams{});
  c.kv_dtype = p.cache_dtype;
  c.rotary = p.rotary.cos ? &p.rotary : nullptr;
  std::vector<AttnSeq> seqs;
  seqs.reserve(size_t(p.batch * p.heads_k));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_k; ++hk) seqs.push_back(cache_job(p, b, hk));
  // The append runs once the call's buffers exist: an out-of-memory error leaves the cache untouched.
  attend_all(c, seqs, [&] {
    if (p.seqlen_new > 0) append_new_tokens(p);
  });
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
