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

template <typename T, int kHeadDim, bool kGeneral, bool kPaired = false, bool kPersistent = false,
          bool kPagedKV = false>
void run_fwd_instance(FwdArgs args, cudaStream_t stream) {
  using Main = FwdMainloop<T, kHeadDim, kGeneral, kPaired>;
  args.num_m_blocks = int(ceil_div(args.p.seqlen_q, Main::kBlockM));
  const int64_t tiles = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (tiles == 0) return;
  args.num_tiles = int(tiles);  // supports_fwd keeps it within the grid limit, 2^31 - 1
  if constexpr (kPagedKV) {
    // supports_fwd keeps page_size and every key position below 2^31 (the division's domain)
    args.page = make_fast_divmod(uint32_t(args.p.paged.page_size));
    args.page_tiles = args.p.paged.page_size % Main::kBlockN == 0;
  }
  auto kernel = fwd_kernel<T, kHeadDim, kGeneral, kPaired, kPersistent, kPagedKV>;
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

// The instances of one (dtype, head-dim bucket) with contiguous K/V (kPagedKV = false) or paged ones.
// The paired tile of bucket 256 has two instances: the persistent one for calls whose tiles all cost the
// same (args.persistent), and one tile per CTA for the others: with one kernel for both, causal calls
// measured 2.2-2.9% slower at S = 512-1k (bench/NOTES.md). Paged calls are varlen: never persistent.
template <typename T, int kHeadDim, bool kPagedKV>
void run_fwd_keys(FwdArgs args, bool paired, cudaStream_t stream) {
  if (args.general) {
    run_fwd_instance<T, kHeadDim, true, false, false, kPagedKV>(args, stream);
  } else if constexpr (has_paired_fwd(kHeadDim, false)) {
    constexpr bool kPersistent = fwd_persistent<kHeadDim, true>() && !kPagedKV;
    if (!paired)
      run_fwd_instance<T, kHeadDim, false, false, false, kPagedKV>(args, stream);
    else if (kPersistent && args.persistent)
      run_fwd_instance<T, kHeadDim, false, true, kPersistent, kPagedKV>(args, stream);
    else
      run_fwd_instance<T, kHeadDim, false, true, false, kPagedKV>(args, stream);
  } else {
    run_fwd_instance<T, kHeadDim, false, false, false, kPagedKV>(args, stream);
  }
}

// Launches the forward for one (dtype, head-dim bucket); instantiated in the generated fwd_hdim<D>.cu
// (fwd_hdim.cu.in). `paired`: the device runs the paired tile where the bucket has one (use_paired_fwd).
// Paged K/V (a varlen call with block_table) run instances of their own, with the same tiles.
template <typename T, int kHeadDim>
void run_fwd(FwdArgs args, bool paired, cudaStream_t stream) {
  if (args.p.paged_kv())
    run_fwd_keys<T, kHeadDim, true>(args, paired, stream);
  else
    run_fwd_keys<T, kHeadDim, false>(args, paired, stream);
}

}  // namespace flashattn::detail::cuda::sm80
