#pragma once

// Memory safety of index values read on the device. The CPU backends check every index value on the
// host and raise a named error (src/api); on a CUDA device the values are not readable without a sync,
// so the kernels clamp each one to what the call's buffers can address instead. A wrong value then
// gives a wrong row, never a read or a write outside the tensors of the call (docs/reliability.md).
// Valid values pass unchanged, so the CPU backends go through the same functions at no cost to
// correctness. One clamp per sequence or per page entry, never per element.

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::detail {

// A length or position read from an index tensor, clamped to [0, hi]; 0 when hi < 0.
FA_HD int64_t clamp_length(int64_t v, int64_t hi) { return v > hi ? (hi > 0 ? hi : 0) : (v < 0 ? 0 : v); }

// An index into n entries (a cache row through cache_batch_idx), clamped to [0, n); 0 when n <= 0,
// where the caller addresses nothing through it (a paged cache has no cache rows).
FA_HD int64_t clamp_index(int64_t v, int64_t n) { return v >= n ? (n > 0 ? n - 1 : 0) : (v < 0 ? 0 : v); }

// A block-table entry clamped to [0, last_page], last_page = min(num_pages - 1, INT32_MAX) (last_page_of).
// 32-bit: it runs once per entry in the decode kernel's copy loop, where registers are counted.
FA_HD int32_t clamp_page(int32_t entry, int32_t last_page) {
  return entry > last_page ? last_page : (entry < 0 ? 0 : entry);
}
FA_HD int32_t last_page_of(int64_t num_pages) {
  return num_pages - 1 > INT32_MAX ? INT32_MAX : (num_pages > 0 ? int32_t(num_pages - 1) : 0);
}

// Rows [start, start + len) of one sequence of a packed (varlen) tensor of `total` rows, from its
// offsets cu_seqlens[b] (`begin`) and cu_seqlens[b + 1] (`end`): start in [0, total], an end below its
// start (non-monotone offsets) or past the total cut to an empty or shorter sequence, and the length at
// most max_len (max_seqlen_q/k, which sizes the kernels' grids and workspaces).
struct PackedSpan {
  int64_t start = 0, len = 0;
};
FA_HD PackedSpan packed_span(int64_t begin, int64_t end, int64_t total, int64_t max_len) {
  PackedSpan s;
  s.start = clamp_length(begin, total);
  s.len = clamp_length(clamp_length(end, total) - s.start, max_len);
  return s;
}

// The extent of one sequence in a KV cache of `capacity` positions per sequence, when `seqlen_new`
// tokens are appended (seqlen_new <= capacity, checked on the host): left padding in [0, capacity],
// the length before the call in [0, capacity - seqlen_new] (its new tokens are written inside the
// cache), and the keys attended, seqlen_before + seqlen_new - leftpad, in [0, capacity - leftpad].
struct CacheExtent {
  int64_t leftpad = 0, seqlen_before = 0, seqlen_k = 0;
};
FA_HD CacheExtent cache_extent(int64_t seqlen_before, int64_t leftpad, int64_t seqlen_new, int64_t capacity) {
  CacheExtent e;
  e.leftpad = clamp_length(leftpad, capacity);
  e.seqlen_before = clamp_length(seqlen_before, capacity - seqlen_new);
  e.seqlen_k = clamp_length(e.seqlen_before + seqlen_new - e.leftpad, capacity - e.leftpad);
  return e;
}

}  // namespace flashattn::detail
