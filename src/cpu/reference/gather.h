#pragma once

// Copies between strided (rows, heads, dim) tensors and dense fp64 row-major buffers.

#include <vector>

#include "api/problem.h"
#include "cpu/common/elem.h"

namespace flashattn::detail::reference {

inline void gather_rows(const RowsView& view, DType dt, int64_t b, int64_t row_start, int64_t rows, int64_t h,
                        int64_t dim, std::vector<double>& dst) {
  dst.resize(size_t(rows * dim));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = view.offset(b, row_start + i, h);
    for (int64_t d = 0; d < dim; ++d) dst[i * dim + d] = load_float(view.ptr, base + d, dt);
  }
}

inline void scatter_rows(const RowsView& view, DType dt, int64_t b, int64_t row_start, int64_t rows, int64_t h,
                         int64_t dim, const std::vector<double>& src) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = view.offset(b, row_start + i, h);
    for (int64_t d = 0; d < dim; ++d) store_float(view.ptr, base + d, dt, float(src[i * dim + d]));
  }
}

inline void store_lse(const LseView& lse, int64_t b, int64_t row_start, int64_t h, const std::vector<double>& v) {
  if (!lse.ptr) return;
  for (size_t i = 0; i < v.size(); ++i) lse.ptr[lse.offset(b, row_start + int64_t(i), h)] = float(v[i]);
}

}  // namespace flashattn::detail::reference
