#pragma once

// TMA tensor maps of the sm90 kernels, built on the host with the driver's cuTensorMapEncodeTiled. The
// library does not link libcuda: the function is looked up once through the runtime
// (cudaGetDriverEntryPointByVersion).

#include <cuda.h>

#include <cstdint>
#include <string>

#include "api/problem.h"

namespace flashattn::detail::cuda::sm90 {

// What a RowsView must satisfy to be described by a map: a 16-byte aligned base and strides that are
// multiples of 16 bytes below 2^40. Empty when it does, else the reason (named after `name`).
std::string tma_view_reason(const RowsView& v, int64_t elem_bytes, const char* name);

// The 4-d map of `v` as (head_dim, rows, heads, batch) elements of 2 bytes (f16 or bf16), box (64,
// box_rows, 1, 1), 128-byte swizzle, out-of-bounds elements read as zero. Dims of size 0 are given size 1
// (no box is ever loaded from them). Throws flashattn::Error (internal) when the driver refuses it.
CUtensorMap make_rows_map(const RowsView& v, DType dtype, int64_t head_dim, int64_t rows, int64_t heads, int64_t batch,
                          int box_rows);

}  // namespace flashattn::detail::cuda::sm90
