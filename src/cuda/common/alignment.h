#pragma once

// The alignment condition of every CUDA kernel that moves rows in 16-byte chunks: the data pointer and
// every stride the kernel steps through are multiples of 16 bytes. Plain C++.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "api/problem.h"

namespace flashattn::detail::cuda {

struct StrideUse {
  const char* what;    // "batch", "row", "head"
  int64_t stride = 0;  // in elements
  // Extent of the dimension when the caller knows that the kernel never steps through a dimension of
  // extent 1 (frameworks leave such strides arbitrary); the default checks the stride whatever it is.
  int64_t extent = 2;
};

// Empty when `name`'s rows are 16-byte aligned, else the first reason they are not.
inline std::string unaligned16_reason(const char* name, const void* ptr, int64_t elem_bytes,
                                      std::initializer_list<StrideUse> strides) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    return std::string(name) + ": data pointer not 16-byte aligned (the kernels load 16-byte chunks)";
  for (const StrideUse& s : strides)
    if (s.extent > 1 && (s.stride * elem_bytes) % 16 != 0)
      return std::string(name) + ": " + s.what + " stride " + std::to_string(s.stride) + " is not a multiple of " +
             std::to_string(16 / elem_bytes) + " elements (16 bytes)";
  return {};
}

// Every stride of a RowsView checked.
inline std::string unaligned16_reason(const char* name, const RowsView& v, int64_t elem_bytes) {
  return unaligned16_reason(name, v.ptr, elem_bytes,
                            {{"batch", v.batch_stride}, {"row", v.row_stride}, {"head", v.head_stride}});
}
inline bool rows_aligned16(const RowsView& v, int64_t elem_bytes) {
  return unaligned16_reason("", v, elem_bytes).empty();
}

// A KV-cache call's tensors that its kernels load in 16-byte chunks: both caches (elements of
// cache_elem_bytes), q (unless rotary, where the kernels read a rotated copy in an aligned workspace) and
// out. A stride of a dimension of extent 1 is never stepped through.
inline std::string kvcache_alignment_reason(const KVCacheProblem& p, int64_t cache_elem_bytes) {
  const CacheView& c = p.cache;
  const auto cache = [&](const char* name, const void* ptr, int64_t batch, int64_t row, int64_t head) {
    return unaligned16_reason(name, ptr, cache_elem_bytes,
                              {{"batch", batch, c.paged() ? c.num_blocks : c.batches},
                               {"row", row, c.paged() ? c.page_size : c.capacity},
                               {"head", head, p.heads_k}});
  };
  const auto rows = [&](const char* name, const RowsView& v) {
    return unaligned16_reason(
        name, v.ptr, 2,
        {{"batch", v.batch_stride, p.batch}, {"row", v.row_stride, p.seqlen_q}, {"head", v.head_stride, p.heads}});
  };
  for (const std::string& r : {cache("k_cache", c.k, c.k_batch_stride, c.k_row_stride, c.k_head_stride),
                               cache("v_cache", c.v, c.v_batch_stride, c.v_row_stride, c.v_head_stride),
                               p.rotary.cos == nullptr ? rows("q", p.q) : std::string(), rows("out", p.out)})
    if (!r.empty()) return r;
  return {};
}

}  // namespace flashattn::detail::cuda
