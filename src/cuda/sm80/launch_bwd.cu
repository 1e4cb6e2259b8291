// Backward launch: D = rowsum(dO * O) -> main kernel (dK, dV, and dQ through fp32 atomics unless
// deterministic) -> dQ conversion, or the deterministic dQ kernel. Workspaces (stream-ordered, freed
// when this function returns, after the kernels are enqueued): D (fp32 per query row and head) and, when
// not deterministic, dq_accum (fp32 like dq, zeroed by the D kernel, which runs first).

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/sm80/bwd_prepost.cuh"
#include "cuda/sm80/launch.h"
#include "cuda/sm80/switch.h"

namespace flashattn::detail::cuda::sm80 {

void launch_bwd(const BwdProblem& p, int64_t smem_optin, cudaStream_t stream) {
  BwdArgs args;
  args.p = p;
  args.s = make_score_args(p);
  const int64_t rows = p.total_q * p.heads;  // (query row, head) pairs
  Workspace dsum(size_t(rows) * sizeof(float), stream);
  args.dsum = dsum.as<float>();
  const bool atomics = !p.deterministic && rows > 0;
  const size_t accum_bytes = atomics ? size_t(dq_accum_elems(p.total_q, p.heads, p.head_dim)) * sizeof(float) : 0;
  Workspace dq_accum(accum_bytes, stream);
  if (atomics) args.dq_accum = dq_accum.as<float>();
  dtype_switch(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (rows > 0) {
      bwd_dsum_kernel<T>
          <<<grid_1d(ceil_div(rows, kPrepostThreads / 32), "sm80 backward D"), kPrepostThreads, 0, stream>>>(args);
      FA_CUDA_CHECK_LAUNCH("sm80 backward D kernel");
    }
    head_dim_switch(head_dim_bucket(p.head_dim), [&](auto bucket) {
      constexpr int kHeadDim = decltype(bucket)::value;
      run_bwd<T, kHeadDim>(args, smem_optin, stream);
      if (p.deterministic) run_bwd_dq<T, kHeadDim>(args, stream);
    });
    if (atomics) {
      bwd_dq_convert_kernel<T>
          <<<grid_1d(ceil_div(rows * (p.head_dim / 8), kPrepostThreads), "sm80 backward dQ convert"), kPrepostThreads,
             0, stream>>>(args);
      FA_CUDA_CHECK_LAUNCH("sm80 backward dQ convert kernel");
    }
  });
}

}  // namespace flashattn::detail::cuda::sm80
