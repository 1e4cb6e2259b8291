#pragma once

// TMA tensor maps of the sm90 kernels, built on the host with the driver's cuTensorMapEncodeTiled. The
// library does not link libcuda: the function is looked up once through the runtime
// (cudaGetDriverEntryPointByVersion).

#include <cuda.h>

#include <cstdint>
#include <string>

#include "api/problem.h"

namespace flashattn::detail::cuda::sm90 {

// What a RowsView of (rows, heads, batch) must satisfy to be described by a map: a 16-byte aligned base
// and, for every dim of more than one element, a positive stride that is a multiple of 16 bytes below 2^40
// (a dim of one element is never stepped over: its stride does not matter). Empty when it does, else the
// reason (named after `name`).
std::string tma_view_reason(const RowsView& v, int64_t elem_bytes, int64_t rows, int64_t heads, int64_t batch,
                            const char* name);

// The 4-d map of `v` as (head_dim, rows, heads, batch) elements of 2 bytes (f16 or bf16), box (64,
// box_rows, 1, 1), or of 1 byte (fp8_e4m3, as uint8), box (128, box_rows, 1, 1): one 128-byte swizzle span a
// box row; out-of-bounds elements read as zero. Dims of size 0 are given size 1
// (no box is ever loaded from them); `v` must pass tma_view_reason. Throws flashattn::Error (internal) when the driver
// refuses it.
CUtensorMap make_rows_map(const RowsView& v, DType dtype, int64_t head_dim, int64_t rows, int64_t heads, int64_t batch,
                          int box_rows);

}  // namespace flashattn::detail::cuda::sm90
