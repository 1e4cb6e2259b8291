// Forward launch: problem -> FwdArgs (constants computed once here) -> the (dtype, head-dim) kernel.

#include <cmath>

#include "cuda/attn/switch.h"
#include "cuda/attn/tile_order.h"
#include "cuda/common/launch.h"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/launch.h"

namespace flashattn::detail::cuda::sm80 {

void launch_fwd(const FwdProblem& p, bool general, bool paired, bool persistent, const DeviceFacts& device,
                cudaStream_t stream) {
  FwdArgs args;
  args.p = p;
  args.general = general;
  args.s = make_score_args(p);
  // Tiles cost the same when no row is masked and every sequence has the same lengths.
  const bool masked = p.score.window_left >= 0 || p.score.window_right >= 0;
  args.persistent = persistent && p.cu_seqlens_q == nullptr && !masked;
  // Masked tiles differ in cost: the order of tile_order.h, over the query tiles of the tile the kernel
  // will run (kernel_traits.h, as FwdMainloop). Varlen lists keep the per-head order: their costs vary
  // with the sequences too.
  const int block_m = fwd_tile(head_dim_bucket(p.head_dim), general, paired).block_m;
  const int64_t m_blocks = ceil_div(p.seqlen_q, block_m), head_seqs = p.batch * p.heads;
  if (masked && p.cu_seqlens_q == nullptr && device.l2_bytes > 0 && m_blocks > 0 && head_seqs > 0) {
    const int64_t kv_bytes = p.seqlen_k * p.head_dim * 2 * dtype_size(p.dtype);
    // The feature-free tiles hold two CTAs per SM on sm_90 (264 running on the H200 in the CTA traces);
    // where a tile holds one (the general instance at D >= 160, sm_80's larger tiles) the light tail is
    // four waves' worth instead of two.
    args.order = masked_tile_order(int(m_blocks), int(head_seqs), kv_bytes, p.group_size(), device.l2_bytes,
                                   2 * int64_t(device.sms));
  }
  dispatch_dtype<false>(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    head_dim_switch(head_dim_bucket(p.head_dim),
                    [&](auto bucket) { run_fwd<T, decltype(bucket)::value>(args, paired, stream); });
  });
}

}  // namespace flashattn::detail::cuda::sm80
