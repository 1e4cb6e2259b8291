#pragma once

// Host-side pieces shared by the three ladder backends (cuda_naive, cuda_fa1_simt, cuda_fa2_simt): the
// support checks they have in common, the per-call arguments of the SIMT kernels, and the head-dim
// dispatch. The backends themselves are declared in api/backends.h.

#include <cstdint>
#include <string>
#include <type_traits>

#include "api/problem.h"
#include "cuda/common/alignment.h"
#include "cuda/ladder/simt_tile.h"
#include "flashattn/error.h"
#include "flashattn/params.h"

namespace flashattn::detail::cuda::ladder {

// Reason why no ladder kernel runs `p` (empty when they can): the dtype must be f32, f16 or bf16 and the
// head dim at most kMaxHeadDim.
std::string common_fwd_support(const FwdProblem& p);

// Reason when a 1-D grid of `blocks` blocks exceeds gridDim.x (empty when it fits).
std::string grid_support(int64_t blocks, const char* what);

// Arguments of the SIMT kernels derived once per call on the host.
struct SimtArgs {
  int64_t q_tiles = 0;  // query tiles per sequence (FA2 grid), from seqlen_q (the maximum when varlen)
  int64_t group = 1;    // query heads per kv head (GQA/MQA)
  bool k_vec16 = false, v_vec16 = false;  // K/V rows may be loaded with 16-byte vectors
  bool dropout = false;
  uint32_t drop_threshold = 0;  // keep when the Philox word >= this (common/philox.h)
  float keep_scale = 1.0f;      // 1 / (1 - p), applied to kept probabilities
};

SimtArgs make_simt_args(const FwdProblem& p, int rows_per_tile);

// cuda_fa2_simt backward (fa2_simt_bwd.cu); the backend is registered with its forward in fa2_simt_fwd.cu.
std::string fa2_simt_supports_bwd(const BwdProblem& p);
void fa2_simt_run_bwd(const BwdProblem& p, Stream stream);

// Calls f(std::integral_constant<int, bucket>{}) for the head-dim bucket of `head_dim` (simt_tile.h).
template <typename F>
void dispatch_head_dim(int64_t head_dim, F&& f) {
  switch (head_dim_bucket(head_dim)) {
    case 32:
      f(std::integral_constant<int, 32>{});
      return;
    case 64:
      f(std::integral_constant<int, 64>{});
      return;
    case 96:
      f(std::integral_constant<int, 96>{});
      return;
    case 128:
      f(std::integral_constant<int, 128>{});
      return;
    case 160:
      f(std::integral_constant<int, 160>{});
      return;
    case 192:
      f(std::integral_constant<int, 192>{});
      return;
    case 224:
      f(std::integral_constant<int, 224>{});
      return;
    case 256:
      f(std::integral_constant<int, 256>{});
      return;
    default:
      throw Error(Status::internal, "flashattn: ladder head-dim dispatch: head_dim " + std::to_string(head_dim) +
                                        " outside the compiled buckets (32..256)");
  }
}

}  // namespace flashattn::detail::cuda::ladder
