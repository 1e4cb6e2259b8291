#pragma once

// FP8 (e4m3) rows to bf16 on the device, times a per-(sequence, kv head) factor: the conversion pass of the
// cuda_fp8 backend (fp8_backend.cpp).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "api/problem.h"

namespace flashattn::detail::cuda::fp8 {

// Rows of a q, k or v tensor: element (o, i, h, d) at src.offset(o, i, h) + d, o < outer, i < inner, h <
// heads, d < head_dim; written to dst[((o * inner + i) * heads + h) * head_dim + d] as bf16(value x factor).
// factor = f1.at(b, h / group) x f2.at(b, h / group) (1 where a view is absent), b the sequence: o for
// dense tensors (outer = batch), the sequence of packed row i for varlen ones (outer = 1, cu_seqlens set
// with `batch` sequences), none for pages (both views absent).
struct DequantRows {
  RowsView src;
  void* dst = nullptr;
  int64_t outer = 0, inner = 0, heads = 0, head_dim = 0, group = 1;
  const int32_t* cu_seqlens = nullptr;
  int64_t batch = 0;
  DescaleView f1, f2;
};

void dequantise_rows(const DequantRows& d, cudaStream_t stream);

}  // namespace flashattn::detail::cuda::fp8
