#include "cuda/ladder/ladder.h"

#include <cstdint>

#include "common/philox.h"
#include "cuda/common/device_props.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"

namespace flashattn::detail::cuda::ladder {

std::string common_fwd_support(const FwdProblem& p) {
  if (!is_kernel_dtype(p.dtype)) return std::string("dtype ") + dtype_name(p.dtype) + " (only f32, f16, bf16)";
  if (p.head_dim > kMaxHeadDim)
    return "head_dim " + std::to_string(p.head_dim) + " above " + std::to_string(kMaxHeadDim);
  return compiled_kernels_reason(p.device.index);
}

std::string grid_support(int64_t blocks, const char* what) {
  if (blocks > kMaxGridX)
    return std::string(what) + " needs " + std::to_string(blocks) + " blocks, above the grid limit 2^31 - 1";
  return {};
}

SimtArgs make_simt_args(const FwdProblem& p, int rows_per_tile) {
  SimtArgs a;
  a.q_tiles = ceil_div(p.seqlen_q, rows_per_tile);
  a.group = p.group_size();
  a.k_vec16 = rows_aligned16(p.k, dtype_size(p.dtype));
  a.v_vec16 = rows_aligned16(p.v, dtype_size(p.dtype));
  a.dropout = p.dropout.p > 0.0f;
  if (a.dropout) {
    a.drop_threshold = dropout_threshold(p.dropout.p);
    a.keep_scale = float(1.0 / (1.0 - double(p.dropout.p)));
  }
  return a;
}

}  // namespace flashattn::detail::cuda::ladder
