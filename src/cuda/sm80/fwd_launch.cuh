#pragma once

// The forward's launch: the compile-time instance of a call (general or feature-free, paired, persistent)
// and its grid (fwd_tile_scheduler.cuh).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/sm80/args.h"
#include "cuda/sm80/debug.h"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kernel_traits.h"

namespace flashattn::detail::cuda::sm80 {

template <typename T, int kHeadDim, bool kGeneral, bool kPaired = false, bool kPersistent = false>
void run_fwd_instance(FwdArgs args, cudaStream_t stream) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  args.num_m_blocks = int(ceil_div(args.p.seqlen_q, Main::kBlockM));
  const int64_t tiles = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (tiles == 0) return;
  args.num_tiles = int(tiles);  // supports_fwd keeps it within the grid limit, 2^31 - 1
  auto kernel = fwd_kernel<T, kHeadDim, kGeneral, kPaired, kPersistent>;
  // (the static shared memory is fwd_kernel's next_loads)
  allow_dynamic_smem(kernel, Main::kSmemBytes, args.p.device.index, "sm80 forward",
                     kPersistent ? 2 * sizeof(FwdTileLoads<T>) : 0);
  const int64_t blocks =
      FwdTileScheduler<kPersistent>::grid(kernel, Main::kThreads, Main::kSmemBytes, tiles, args.p.device.index);
  fwd_trace_begin(args, blocks);
  kernel<<<grid_1d(blocks, "sm80 forward"), Main::kThreads, Main::kSmemBytes, stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm80 forward kernel");
  fwd_trace_end(args, blocks, stream);
}

// Launches the forward for one (dtype, head-dim bucket); instantiated in the generated fwd_hdim<D>.cu
// (fwd_hdim.cu.in). `paired`: the device runs the paired tile where the bucket has one (use_paired_fwd).
// The paired tile of bucket 256 has two instances: the persistent one for calls whose tiles all cost the
// same (args.persistent), and one tile per CTA for the others: with one kernel for both, causal calls
// measured 2.2-2.9% slower at S = 512-1k (bench/NOTES.md).
template <typename T, int kHeadDim>
void run_fwd(FwdArgs args, bool paired, cudaStream_t stream) {
  if (args.general) {
    run_fwd_instance<T, kHeadDim, true>(args, stream);
  } else if constexpr (has_paired_fwd(kHeadDim, false)) {
    if (!paired)
      run_fwd_instance<T, kHeadDim, false>(args, stream);
    else if (fwd_persistent<kHeadDim, true>() && args.persistent)
      run_fwd_instance<T, kHeadDim, false, true, fwd_persistent<kHeadDim, true>()>(args, stream);
    else
      run_fwd_instance<T, kHeadDim, false, true>(args, stream);
  } else {
    run_fwd_instance<T, kHeadDim, false>(args, stream);
  }
}

}  // namespace flashattn::detail::cuda::sm80
