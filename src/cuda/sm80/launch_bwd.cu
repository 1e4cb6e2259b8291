// Backward launch: D = rowsum(dO * O) -> main kernel (dK, dV, and dQ through fp32 atomics unless
// deterministic) -> dQ conversion, or the deterministic dQ kernel. Workspaces (stream-ordered, freed
// when this function returns, after the kernels are enqueued): D (fp32 per query row and head) and, when
// not deterministic, dq_accum (fp32 like dq, zeroed by the D kernel, which runs first).

#include <cstdint>

#include "cuda/attn/bwd_prepost.cuh"
#include "cuda/attn/switch.h"
#include "cuda/attn/tile_order.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/launch.h"

namespace flashattn::detail::cuda::sm80 {

namespace {

// The tiled kernel's key-tile order. Masked key tiles differ in cost, so a masked call (not varlen, whose
// costs vary with the sequences too) may take the forward's order (attn/tile_order.h), sized by what a KV
// head's CTAs share in L2 (the Q and dO rows of its query heads and their fp32 dQ) and one CTA per SM (the
// tiles take 114-209 KB of shared memory). Only where a KV head has at most half as many key tiles as the
// device has SMs: measured on the H200 (bench/NOTES.md), causal backward +1-6% with 64 key
// tiles per head or fewer and 1-3% slower with 128 or more, where the per-head order already runs about
// one head at a time on the whole device and the groups only add L2 traffic.
TileOrder bwd_tile_order(const BwdProblem& p, const BwdTile& tile, int n_blocks, const DeviceFacts& device) {
  const bool masked = p.score.window_left >= 0 || p.score.window_right >= 0;
  const int64_t head_seqs = p.batch * p.heads_k;
  if (!tile.tiled || !masked || p.cu_seqlens_q != nullptr || device.l2_bytes <= 0 || n_blocks == 0 || head_seqs == 0 ||
      2 * n_blocks > device.sms)
    return TileOrder{};  // per (sequence, kv head)
  const int64_t bytes = p.group_size() * p.seqlen_q * p.head_dim * (2 * dtype_size(p.dtype) + 4);
  return masked_tile_order(n_blocks, int(head_seqs), bytes, 1, device.l2_bytes, device.sms);
}

}  // namespace

void launch_bwd(const BwdProblem& p, int64_t smem_optin, const DeviceFacts& device, cudaStream_t stream) {
  BwdArgs args;
  args.p = p;
  args.s = make_score_args(p);
  // The partition the main kernel runs (run_bwd picks its kernel by the same call).
  const BwdTile tile = bwd_tile_for(head_dim_bucket(p.head_dim), smem_optin);
  args.num_n_blocks = int(ceil_div(p.seqlen_k, tile.block_n));
  args.order = bwd_tile_order(p, tile, args.num_n_blocks, device);
  const int64_t rows = p.total_q * p.heads;  // (query row, head) pairs
  Workspace dsum(size_t(rows) * sizeof(float), stream);
  args.dsum = dsum.as<float>();
  const bool atomics = !p.deterministic && rows > 0;
  const size_t accum_bytes = atomics ? size_t(dq_accum_elems(p.total_q, p.heads, p.head_dim)) * sizeof(float) : 0;
  Workspace dq_accum(accum_bytes, stream);
  if (atomics) args.dq_accum = dq_accum.as<float>();
  dispatch_dtype<false>(p.dtype, [&](auto tag) {
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
