#pragma once

// The index-value check of the opt-in check mode (AttentionOptions::check_index_values,
// FLASHATTN_CHECK_INDEX_VALUES=1): the same rules as the host checks of the CPU backends (src/api),
// written once as FA_HD functions over one sequence or one page entry, so that a small CUDA kernel
// (cuda/common/index_check.cu) runs them over every value on the device and the host tests run them
// against the host checks. A fault is reported by the batch index, the entry (block_table column), the
// value and the bound it broke; src/api turns the first one into the named error.

#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/kvcache.h"

namespace flashattn::detail {

// In the order the host checks report them within one sequence (a fault's rank after its batch index).
enum class IndexFaultKind : int32_t {
  none = 0,
  cu_seqlens_q_first,  // cu_seqlens_q[0] != 0
  cu_seqlens_q_order,  // cu_seqlens_q[b] < cu_seqlens_q[b - 1]
  cu_seqlens_q_max,    // a length above max_seqlen_q
  cu_seqlens_q_total,  // cu_seqlens_q[batch] != total_q
  cu_seqlens_k_first,
  cu_seqlens_k_order,
  cu_seqlens_k_max,
  cu_seqlens_k_total,
  block_table_short,  // paged: cache_seqlens + seqlen_new past max_blocks_per_seq * page_size
  cache_seqlens,      // outside [0, capacity - seqlen_new]
  rotary_cos,         // the last rotated query position past the rows of rotary_cos
  cache_batch_idx,    // outside [0, cache batch)
  cache_leftpad,      // outside [0, cache_seqlens[b]]
  block_table,        // an entry the sequence uses outside [0, num_pages)
};

struct IndexFault {
  IndexFaultKind kind = IndexFaultKind::none;
  int64_t batch = 0;  // the sequence (for cu_seqlens: the offset's index)
  int64_t entry = 0;  // block_table: the column; else 0
  int64_t value = 0;  // the offending value
  int64_t bound = 0;  // what it broke (see each check)

  FA_HD bool found() const { return kind != IndexFaultKind::none; }
  // Orders faults as the host checks meet them: by batch, then kind, then entry.
  FA_HD bool before(const IndexFault& o) const {
    if (!o.found()) return found();
    if (!found()) return false;
    if (batch != o.batch) return batch < o.batch;
    if (kind != o.kind) return int32_t(kind) < int32_t(o.kind);
    return entry < o.entry;
  }
};

FA_HD IndexFault index_fault(IndexFaultKind kind, int64_t batch, int64_t entry, int64_t value, int64_t bound) {
  IndexFault f;
  f.kind = kind;
  f.batch = batch;
  f.entry = entry;
  f.value = value;
  f.bound = bound;
  return f;
}

// Offset i in [0, batch] of one cu_seqlens array (q: kinds cu_seqlens_q_*, k: cu_seqlens_k_*). Bounds:
// first 0; order cu[i - 1]; max max_seqlen; total the rows of the packed tensor, or -1 where the offsets
// address no rows (paged K/V: cu_seqlens_k gives key counts only).
FA_HD IndexFault cu_seqlens_fault(const int32_t* cu, int64_t i, int64_t batch, int64_t total, int64_t max_seqlen,
                                  bool is_k) {
  const int32_t base = is_k ? int32_t(IndexFaultKind::cu_seqlens_k_first) : int32_t(IndexFaultKind::cu_seqlens_q_first);
  const auto kind = [&](int32_t k) { return IndexFaultKind(base + k); };
  const int64_t v = cu[i];
  if (i == 0) {
    if (v != 0) return index_fault(kind(0), i, 0, v, 0);
  } else {
    const int64_t prev = cu[i - 1];
    if (v < prev) return index_fault(kind(1), i, 0, v, prev);
    if (v - prev > max_seqlen) return index_fault(kind(2), i, 0, v - prev, max_seqlen);
  }
  if (i == batch && total >= 0 && v != total) return index_fault(kind(3), i, 0, v, total);
  return IndexFault{};
}

FA_HD int64_t raw_cache_seqlen(const KVCacheProblem& p, int64_t b) {
  return p.cache_seqlens ? p.cache_seqlens[b] : p.cache_seqlens_scalar;
}

// Everything of sequence b but its block-table entries. Bounds: block_table_short the capacity;
// cache_seqlens capacity - seqlen_new; rotary_cos its rows (value: the last position rotated);
// cache_batch_idx the cache batch; cache_leftpad cache_seqlens[b].
FA_HD IndexFault kv_sequence_fault(const KVCacheProblem& p, int64_t b) {
  const int64_t len = raw_cache_seqlen(p, b), room = p.cache.capacity - p.seqlen_new;
  if (len < 0 || len > room) {
    const bool short_table = len >= 0 && p.cache.paged();
    return short_table ? index_fault(IndexFaultKind::block_table_short, b, 0, len, p.cache.capacity)
                       : index_fault(IndexFaultKind::cache_seqlens, b, 0, len, room);
  }
  if (p.rotary.cos && p.seqlen_q > 0) {
    const int64_t last = len + (rotary_q_consecutive(p.score) ? p.seqlen_q - 1 : 0);
    if (last >= p.rotary.seqlen) return index_fault(IndexFaultKind::rotary_cos, b, 0, last, p.rotary.seqlen);
  }
  if (p.cache_batch_idx) {
    const int64_t idx = p.cache_batch_idx[b];
    if (idx < 0 || idx >= p.cache.batches)
      return index_fault(IndexFaultKind::cache_batch_idx, b, 0, idx, p.cache.batches);
  }
  if (p.cache_leftpad) {
    const int64_t pad = p.cache_leftpad[b];
    if (pad < 0 || pad > len) return index_fault(IndexFaultKind::cache_leftpad, b, 0, pad, len);
  }
  return IndexFault{};
}

// The block-table columns sequence b uses, [first, end): from the page of its first position after the
// left padding to the page of its last one (pages wholly inside the padding are never read). Empty when
// the sequence's lengths are faulty themselves (kv_sequence_fault reports those).
struct PageColumns {
  int64_t first = 0, end = 0;
};
FA_HD PageColumns kv_page_columns(const KVCacheProblem& p, int64_t b) {
  if (!p.cache.paged() || kv_sequence_fault(p, b).found()) return PageColumns{};
  const int64_t first = p.cache_leftpad ? p.cache_leftpad[b] : 0;
  const int64_t end = raw_cache_seqlen(p, b) + p.seqlen_new;
  return PageColumns{first / p.cache.page_size, (end + p.cache.page_size - 1) / p.cache.page_size};
}

// Column i of sequence b's row of block_table (a column kv_page_columns returned). Bound: num_pages.
FA_HD IndexFault kv_page_fault(const KVCacheProblem& p, int64_t b, int64_t i) {
  const int64_t v = p.cache.block_table[b * p.cache.block_table_stride + i];
  if (v < 0 || v >= p.cache.num_blocks) return index_fault(IndexFaultKind::block_table, b, i, v, p.cache.num_blocks);
  return IndexFault{};
}

}  // namespace flashattn::detail
