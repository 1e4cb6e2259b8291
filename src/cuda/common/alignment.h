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

}  // namespace flashattn::detail::cuda
