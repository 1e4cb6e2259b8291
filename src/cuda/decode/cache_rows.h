#pragma once

// Addressing of the key rows of one (sequence, kv head) in the K and V caches: common/kvcache.h's
// cache_offset, split into what is fixed for a block (strides, the head offset, the sequence's row of
// the block table) and what depends on the position. Plain C++ (FA_HD), so the host tests can check it
// against cache_offset for every position.
//
// A paged position costs a block-table read. The kernel reads the entries of all the rows a thread
// copies in a tile as independent loads, one tile ahead of the tile's copies (tile_loader.cuh,
// fetch_page_entries), so no copy waits on a table read.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/kvcache.h"
#include "cuda/attn/fast_divmod.h"

namespace flashattn::detail::cuda::decode {

using attn::FastDivmod;  // attn/fast_divmod.h

struct CacheRows {
  int64_t k_batch_stride = 0, v_batch_stride = 0;  // paged: stride between blocks
  int64_t k_row_stride = 0, v_row_stride = 0;
  int64_t k_head = 0, v_head = 0;  // hk * head stride
  int64_t k_seq = 0, v_seq = 0;    // contiguous: cache_row * batch stride
  const int32_t* table = nullptr;  // paged: this sequence's row of block_table, else nullptr
  FastDivmod page;                 // paged: division by page_size
  int32_t last_page = 0;           // paged: entries are clamped to [0, last_page] (common/index_bounds.h)
  // Paged, the usual layout: K and V share their page and row strides, a page is less than 2 GB and
  // so is page_size rows. Then a row's byte offset is entry * page_bytes + in_page * row_bytes in 32-bit
  // factors, the same for K and V (the tile loader's short path).
  bool compact_paging = false;
  int32_t page_bytes = 0, row_bytes = 0;  // compact_paging: the page and row strides in bytes

  FA_HD bool paged() const { return table != nullptr; }

  // Index into `table` of the page holding cache position pos (paged caches).
  FA_HD uint32_t page_index(int pos) const {
    uint32_t index, in_page;
    page.divmod(uint32_t(pos), &index, &in_page);
    return index;
  }

  // The block-table entry of cache position pos (paged caches only), clamped to the page pool.
  FA_HD int32_t block_of(int pos) const { return clamp_page(table[page_index(pos)], last_page); }

  // Element offsets of cache position pos in the K and V caches; `block` is block_of(pos) for a paged
  // cache and ignored otherwise. The tile loader adds the head offsets once per thread and the row
  // parts below per row, so both go through the same arithmetic.
  FA_HD void offsets(int pos, int32_t block, int64_t* k_off, int64_t* v_off) const {
    if (paged()) {
      uint32_t index, in_page;
      page.divmod(uint32_t(pos), &index, &in_page);
      *k_off = k_paged_row(block, in_page) + k_head;
      *v_off = v_paged_row(block, in_page) + v_head;
    } else {
      *k_off = k_contiguous_row(pos) + k_head;
      *v_off = v_contiguous_row(pos) + v_head;
    }
  }

  // The row parts of offsets(): row `in_page` of page `block`, or position pos of a contiguous cache.
  FA_HD int64_t k_paged_row(int32_t block, uint32_t in_page) const {
    return int64_t(block) * k_batch_stride + int64_t(in_page) * k_row_stride;
  }
  FA_HD int64_t v_paged_row(int32_t block, uint32_t in_page) const {
    return int64_t(block) * v_batch_stride + int64_t(in_page) * v_row_stride;
  }
  // compact_paging: the byte offset of a row of page `block` (its position in the page times row_bytes
  // given as in_page_bytes), the same for K and V; add it to the K or V base and head offset in bytes.
  // Unsigned 32 x 32 + 64 bits, one multiply-add: the entries of visible rows are page indices >= 0.
  FA_HD uint64_t compact_row_bytes(int32_t block, uint32_t in_page_bytes) const {
    return uint64_t(uint32_t(block)) * uint32_t(page_bytes) + in_page_bytes;
  }
  FA_HD int64_t k_contiguous_row(int64_t pos) const { return k_seq + pos * k_row_stride; }
  FA_HD int64_t v_contiguous_row(int64_t pos) const { return v_seq + pos * v_row_stride; }
};

// Bytes of one cache element: 1 for an FP8 cache, else 2 (the decode kernels' 16-bit types).
FA_HD int cache_elem_bytes(const KVCacheProblem& p) { return p.cache_dtype == DType::fp8_e4m3 ? 1 : 2; }

// Whether a cache takes the compact paged path (CacheRows::compact_paging): paged, K and V with the same
// page and row strides, a page's stride and page_size rows each below 2^31 bytes (elements of elem_bytes).
FA_HD bool uses_compact_paging(const CacheView& c, int elem_bytes) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  return c.block_table != nullptr && c.k_batch_stride == c.v_batch_stride && c.k_row_stride == c.v_row_stride &&
         c.k_batch_stride >= 0 && c.k_row_stride >= 0 && c.k_batch_stride * elem_bytes < kLimit &&
         c.k_row_stride * elem_bytes < kLimit && c.page_size * c.k_row_stride * elem_bytes < kLimit;
}

FA_HD CacheRows make_cache_rows(const KVCacheProblem& p, const CacheSeq& s, int64_t b, int64_t hk,
                                const FastDivmod& page) {
  CacheRows c;
  c.k_batch_stride = p.cache.k_batch_stride;
  c.v_batch_stride = p.cache.v_batch_stride;
  c.k_row_stride = p.cache.k_row_stride;
  c.v_row_stride = p.cache.v_row_stride;
  c.k_head = hk * p.cache.k_head_stride;
  c.v_head = hk * p.cache.v_head_stride;
  c.k_seq = s.cache_row * p.cache.k_batch_stride;
  c.v_seq = s.cache_row * p.cache.v_batch_stride;
  c.table = p.cache.block_table ? p.cache.block_table + b * p.cache.block_table_stride : nullptr;
  c.page = page;
  c.last_page = last_page_of(p.cache.num_blocks);
  const int elem = cache_elem_bytes(p);
  c.compact_paging = uses_compact_paging(p.cache, elem);
  if (c.compact_paging) {
    c.page_bytes = int32_t(c.k_batch_stride * elem);
    c.row_bytes = int32_t(c.k_row_stride * elem);
  }
  return c;
}

}  // namespace flashattn::detail::cuda::decode
