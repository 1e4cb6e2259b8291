#pragma once

// Addressing of the key rows of one sequence of a varlen forward whose K/V are paged (FwdProblem::paged,
// flash_attn_varlen_func with block_table): key j lives in page block_table[b][j / page_size], row
// j % page_size. common/score.h's key_offset is the rule (what the CPU backends read); this is the same
// rule split into what is fixed for a sequence (its block-table row, the page division) and what a
// kernel computes per key, with the division by page_size a multiply-shift (fast_divmod.h). Plain C++
// (FA_HD): the host tests compare it with key_offset for every key of many page sizes.
//
// Index safety (docs/reliability.md, "Index values"): every block-table entry read is clamped to the page
// pool (common/index_bounds.h, clamp_page), so a wrong entry gives a wrong row, never a read outside the
// cache. Callers only ask for keys below the sequence's clamped length (seq_range), which is at most
// max_blocks_per_seq * page_size: the table index stays inside the sequence's row.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/index_bounds.h"
#include "cuda/attn/fast_divmod.h"

namespace flashattn::detail::cuda::attn {

struct PagedKeyRows {
  const int32_t* table = nullptr;  // sequence b's row of block_table
  FastDivmod page;                 // division by page_size
  int32_t last_page = 0;           // entries are clamped to [0, last_page]

  // Element offset of key `key` (0 <= key < 2^31) in a cache whose pages are `page_stride` and rows
  // `row_stride` elements apart, without the head's offset.
  FA_HD int64_t row_offset(int key, int64_t page_stride, int64_t row_stride) const {
    uint32_t index, in_page;
    page.divmod(uint32_t(key), &index, &in_page);
    return int64_t(clamp_page(table[index], last_page)) * page_stride + int64_t(in_page) * row_stride;
  }
};

// The rows of sequence b; `page` is make_fast_divmod(paged.page_size), built once per call on the host.
FA_HD PagedKeyRows paged_key_rows(const PagedKeys& paged, const FastDivmod& page, int64_t b) {
  return PagedKeyRows{paged.block_table + b * paged.block_table_stride, page, last_page_of(paged.num_blocks)};
}

}  // namespace flashattn::detail::cuda::attn
