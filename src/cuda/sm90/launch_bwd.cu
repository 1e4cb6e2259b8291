// Host side of the sm90 backward: D = rowsum(dO * O) (which also clears dq_accum) -> the main kernel
// (bwd_kernel.cuh: dK, dV, and dQ added into dq_accum) -> dQ rounded to the dtype. The kernels around
// the main one are the other CUDA backward's (attn/bwd_prepost.cuh). The deterministic mode keeps dq, dk
// and dv bitwise repeatable: with the bulk dQ, the main kernel adds each dQ block in a fixed order of its
// CTAs (bwd_kernel.cuh, args.dq_order); with the per-thread reductions (FLASHATTN_SM90_BWD_DQ_BULK=0), the
// main kernel runs without dQ and then sm80's dQ kernel computes each query tile's dQ whole. Workspaces
// (stream-ordered, freed when this function returns, after the kernels are enqueued): D (fp32 per query
// row and head), dq_accum where the main kernel adds dQ (fp32: in whole query tiles, sm90/dq_tiles.h, for
// the bulk reductions, else in attn/dq_accum.h's blocked layout; the D kernel clears it and the convert
// kernel reads it through that layout's policy), and the ordered mode's counters.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attn/bwd_prepost.cuh"
#include "cuda/attn/head_dim.h"
#include "cuda/attn/switch.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/sm80/launch.h"
#include "cuda/sm90/bwd_tile.h"
#include "cuda/sm90/dq_tiles.h"
#include "cuda/sm90/launch.h"

namespace flashattn::detail::cuda::sm90 {

namespace {

// The main kernel of a compiled bucket (bwd_hdim<D>.cu); supports_bwd refuses the others.
template <typename T>
void run_bwd_bucket(const BwdArgs& args, int bucket, cudaStream_t stream) {
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_64)
  if (bucket == 64) return run_bwd<T, 64>(args, stream);
#endif
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_128)
  if (bucket == 128) return run_bwd<T, 128>(args, stream);
#endif
  (void)args;
  (void)stream;
  throw Error(Status::internal, "flashattn: cuda_sm90 backward: head-dim bucket " + std::to_string(bucket) +
                                    " has no kernel in this build (supports_bwd should have refused)");
}

}  // namespace

void launch_bwd(BwdArgs args, cudaStream_t stream) {
  const BwdProblem& p = args.base.p;
  const int64_t rows = p.total_q * p.heads;  // (query row, head) pairs
  Workspace dsum(size_t(rows) * sizeof(float), stream);
  args.base.dsum = dsum.as<float>();
  // The deterministic mode: ordered bulk reductions, or (without the bulk dQ) the main kernel without dQ and
  // then sm80's dQ kernel (per query tile, no atomics).
  const bool ordered = p.deterministic && args.dq_bulk && rows > 0;
  const bool atomics = (!p.deterministic || args.dq_bulk) && rows > 0;
  const int64_t tiles = dq_tiles(p.varlen(), p.batch, p.seqlen_q, p.total_q);
  const int64_t dq_elems = args.dq_bulk ? tiles * p.heads * bwd_bucket(p.head_dim) * kDqTileRows
                                        : attn::dq_accum_elems(p.total_q, p.heads, p.head_dim);
  Workspace dq_accum(atomics ? size_t(dq_elems) * sizeof(float) : 0, stream);
  args.base.dq_accum = atomics ? dq_accum.as<float>() : nullptr;
  const size_t order_bytes =
      ordered ? size_t(dq_order_ticket(p.varlen(), p.batch, p.seqlen_q, p.total_q, p.heads) + 1) * sizeof(int) : 0;
  Workspace dq_order(order_bytes, stream);
  args.dq_order = ordered ? dq_order.as<int>() : nullptr;
  if (ordered) FA_CUDA_CHECK(cudaMemsetAsync(args.dq_order, 0, order_bytes, stream));
  // The plain main kernel leaves the softmax scale out of dS (bwd_kernel.cuh); the convert kernel applies it.
  args.base.dq_scale = attn::needs_general_kernel(p) ? 1.0f : p.score.softmax_scale;
  dispatch_dtype<false>(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (rows > 0) {
      const auto dsum_kernel =
          args.dq_bulk ? attn::bwd_dsum_kernel<T, TiledDqLayout> : attn::bwd_dsum_kernel<T, attn::BlockedDqLayout>;
      dsum_kernel<<<grid_1d(ceil_div(rows, attn::kPrepostThreads / 32), "sm90 backward D"), attn::kPrepostThreads, 0,
                    stream>>>(args.base);
      FA_CUDA_CHECK_LAUNCH("sm90 backward D kernel");
    }
    run_bwd_bucket<T>(args, bwd_bucket(p.head_dim), stream);
    if (p.deterministic && !ordered && rows > 0)
      attn::head_dim_switch(attn::head_dim_bucket(p.head_dim),
                            [&](auto bucket) { sm80::run_bwd_dq<T, decltype(bucket)::value>(args.base, stream); });
    if (atomics) {
      const auto convert_kernel = args.dq_bulk ? attn::bwd_dq_convert_kernel<T, TiledDqLayout>
                                               : attn::bwd_dq_convert_kernel<T, attn::BlockedDqLayout>;
      convert_kernel<<<grid_1d(ceil_div(rows * (p.head_dim / 8), attn::kPrepostThreads), "sm90 backward dQ convert"),
                       attn::kPrepostThreads, 0, stream>>>(args.base);
      FA_CUDA_CHECK_LAUNCH("sm90 backward dQ convert kernel");
    }
  });
}

}  // namespace flashattn::detail::cuda::sm90
