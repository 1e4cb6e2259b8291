#pragma once

// Addressing and rotary rules of forward_kvcache, shared by every backend.
//
// Sequence b uses cache row c = cache_batch_idx[b] (or b). Its valid keys before the call are cache
// positions [leftpad, seqlen_before); new tokens are written at positions seqlen_before + t. Attention
// then runs over the effective keys jj = pos - leftpad, jj in [0, seqlen_k), with
// seqlen_k = seqlen_before + seqlen_new - leftpad, and the usual bottom-right aligned mask.
// Rotary (as flash-attn): new key t is rotated at absolute position seqlen_before + t; query i at
// seqlen_before + i when the call is causal or local, else every query at seqlen_before.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/index_bounds.h"

namespace flashattn::detail {

struct CacheSeq {
  int64_t cache_row = 0;      // contiguous caches: row of k_cache/v_cache
  int64_t seqlen_before = 0;  // cache_seqlens[b]
  int64_t leftpad = 0;
  int64_t seqlen_k = 0;  // keys attended: seqlen_before + seqlen_new - leftpad
};

// The index values are clamped to the cache (common/index_bounds.h): unchecked values on a GPU address
// a wrong row at worst, never memory outside the cache.
FA_HD CacheSeq cache_seq(const KVCacheProblem& p, int64_t b) {
  CacheSeq s;
  s.cache_row = p.cache_batch_idx ? clamp_index(p.cache_batch_idx[b], p.cache.batches) : b;
  const CacheExtent e = cache_extent(p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlens_scalar,
                                     p.cache_leftpad ? p.cache_leftpad[b] : 0, p.seqlen_new, p.cache.capacity);
  s.seqlen_before = e.seqlen_before;
  s.leftpad = e.leftpad;
  s.seqlen_k = e.seqlen_k;
  return s;
}

// Element offset of (position pos, kv head hk, dim 0) in the K (is_v = false) or V cache.
FA_HD int64_t cache_offset(const CacheView& c, const CacheSeq& s, int64_t b, int64_t pos, int64_t hk, bool is_v) {
  const int64_t bs = is_v ? c.v_batch_stride : c.k_batch_stride;
  const int64_t rs = is_v ? c.v_row_stride : c.k_row_stride;
  const int64_t hs = is_v ? c.v_head_stride : c.k_head_stride;
  if (c.block_table) {
    const int64_t block =
        clamp_page(c.block_table[b * c.block_table_stride + pos / c.page_size], last_page_of(c.num_blocks));
    return block * bs + (pos % c.page_size) * rs + hk * hs;
  }
  return s.cache_row * bs + pos * rs + hk * hs;
}

// Whether queries are rotated at consecutive positions (causal or local) or all at seqlen_before.
FA_HD bool rotary_q_consecutive(const ScoreParams& s) { return s.window_left >= 0 || s.window_right >= 0; }

// Clamped to the rows of rotary_cos (checked on the host only where cache_seqlens is readable there).
FA_HD int64_t rotary_q_position(const KVCacheProblem& p, const CacheSeq& s, int64_t i) {
  return clamp_length(s.seqlen_before + (rotary_q_consecutive(p.score) ? i : 0), p.rotary.seqlen - 1);
}

// Index pairs rotated together: (2r, 2r + 1) interleaved (GPT-J), (r, r + dim/2) otherwise (GPT-NeoX),
// for r in [0, rotary_dim / 2).
FA_HD void rotary_pair(const RotaryParams& r, int64_t pair, int64_t* i0, int64_t* i1) {
  if (r.interleaved) {
    *i0 = 2 * pair;
    *i1 = 2 * pair + 1;
  } else {
    *i0 = pair;
    *i1 = pair + r.dim / 2;
  }
}

}  // namespace flashattn::detail
