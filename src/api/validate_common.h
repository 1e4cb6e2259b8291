#pragma once

// Pieces of validation shared by forward, backward and KV-cache calls.

#include "api/checks.h"
#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail {

constexpr int64_t kMaxHeadDim = 256;

// head_dim must be in [1, kMaxHeadDim]. Backends that need a multiple of 8 get one through padding
// (head_dim_pad.h), so the caller's width is never restricted further.
void check_head_dim(const ArgChecker& c, const char* name, int64_t head_dim);
// heads must be a positive multiple of heads_k.
void check_heads(const ArgChecker& c, int64_t heads, int64_t heads_k, const char* k_name);

// Validates softmax_scale, window, softcap and ALiBi slopes and returns them normalised.
ScoreParams make_score_params(const ArgChecker& c, const AttentionOptions& o, int64_t batch, int64_t heads,
                              int64_t head_dim, Device device);

// t.stride[dim] for the views the backends index, or 0 when `t` has no elements: validation does not bound
// the strides of an empty tensor, and a backend may still compute b * batch_stride + h * head_stride for
// it (without reading), which must not overflow.
int64_t view_stride(const Tensor& t, int dim);

// A (rows, heads, dim) view of a 4-dim dense (B, S, H, D) or 3-dim varlen (total, H, D) tensor.
RowsView rows_view(const Tensor& t);

// An FP8 descale factor tensor (absent: factor 1): fp32 (batch, heads_k) on `device`, any strides; refused
// unless `allowed` (the call has FP8 data), saying it applies to `allowed_with` only.
DescaleView descale_view(const ArgChecker& c, const Tensor& t, const char* name, int64_t batch, int64_t heads_k,
                         Device device, bool allowed, const char* allowed_with);

}  // namespace flashattn::detail
