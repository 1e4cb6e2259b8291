// cuda_fa2_simt: FlashAttention-2 forward on CUDA cores.
//
// One block per (query tile, head, sequence). The block's rows keep q and their output accumulator in
// registers and stream the K/V tiles they can see through shared memory (converted to fp32 once per
// tile), with the online softmax of row_math.cuh; out and LSE are written once at the end. K/V tiles
// entirely hidden by causal or window masks are never loaded.
// The backend's backward is in fa2_simt_bwd.cu; both directions are registered at the end of this file.

#include <cuda_runtime.h>

#include <string>

#include "api/backends.h"
#include "common/score.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/ladder/ladder.h"
#include "cuda/ladder/row_math.cuh"

namespace flashattn::detail::cuda::ladder {

namespace {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kSimtThreads, kSimtMinBlocks)
    fa2_simt_fwd_kernel(const FwdProblem p, const SimtArgs a) {
  using L = Layout<kHeadDim>;
  extern __shared__ float4 smem[];
  float* ks = reinterpret_cast<float*>(smem);
  float* vs = ks + L::kKeys * kHeadDim;

  // blockIdx.x = (b * heads + h) * q_tiles + reversed tile: the tiles of one head run side by side (they
  // share K/V in L2), and under a causal mask the last tiles, which see the most keys, start first.
  const int64_t bid = blockIdx.x;
  const int64_t q_tile = a.q_tiles - 1 - bid % a.q_tiles;
  const int64_t h = (bid / a.q_tiles) % p.heads;
  const int64_t b = bid / a.q_tiles / p.heads;
  const SeqRange r = seq_range(p, b);
  const int64_t i0 = q_tile * L::kRows;
  if (i0 >= r.sq) return;  // the whole block: a tile past the end of a shorter (varlen) sequence

  const Mask mask = make_mask(p.score, r.sq, r.sk);
  const int row = threadIdx.x / L::kLanes;
  const int lane = threadIdx.x % L::kLanes;
  const int64_t i = i0 + row;
  const bool active = i < r.sq;
  const int head_dim = int(p.head_dim);
  const RowCtx ctx = make_row_ctx(p, a, mask, b, h, i, active);

  float q[L::kDims];
  if (active) {
    load_row<kHeadDim>(static_cast<const T*>(p.q.ptr) + p.q.offset(b, r.q_start + i, h), head_dim, lane, q);
  } else {
#pragma unroll
    for (int d = 0; d < L::kDims; ++d) q[d] = 0.0f;
  }
  RowAcc<L::kDims> acc;
#pragma unroll
  for (int d = 0; d < L::kDims; ++d) acc.o[d] = 0.0f;
  acc.m = -INFINITY;
  acc.l = 0.0f;

  // Keys any row of the tile sees: key_begin and key_end are non-decreasing in the row, so the union is
  // [key_begin(first row), key_end(last row)). Tiles start on multiples of kKeys (dropout needs n0 % 4 == 0).
  const int64_t last = (i0 + L::kRows < r.sq ? i0 + L::kRows : r.sq) - 1;
  const int64_t kv_begin = mask.key_begin(i0);
  const int64_t kv_end = mask.key_end(last);
  const int64_t hk = h / a.group;
  const T* k_base = static_cast<const T*>(p.k.ptr) + p.k.offset(b, r.k_start, hk);
  const T* v_base = static_cast<const T*>(p.v.ptr) + p.v.offset(b, r.k_start, hk);
  for (int64_t n0 = kv_begin / L::kKeys * L::kKeys; n0 < kv_end; n0 += L::kKeys) {
    const int n_valid = int(kv_end - n0 < L::kKeys ? kv_end - n0 : L::kKeys);
    __syncthreads();  // every row is done with the previous tile
    load_kv_tile<kHeadDim, L::kKeys>(k_base + n0 * p.k.row_stride, p.k.row_stride, n_valid, head_dim, a.k_vec16, ks);
    load_kv_tile<kHeadDim, L::kKeys>(v_base + n0 * p.v.row_stride, p.v.row_stride, n_valid, head_dim, a.v_vec16, vs);
    __syncthreads();  // the tile is complete
    attend_tile<kHeadDim>(ks, vs, n0, n_valid, lane, q, acc, ctx);
  }

  if (!active) return;
  store_row<kHeadDim>(static_cast<T*>(p.out.ptr) + p.out.offset(b, r.q_start + i, h), head_dim, lane, acc.o,
                      row_out_scale(acc.l));
  if (p.lse.ptr != nullptr && lane == 0) p.lse.ptr[p.lse.offset(b, r.q_start + i, h)] = row_lse(acc.m, acc.l);
}

int64_t fa2_blocks(const FwdProblem& p) {
  const SimtTile tile = simt_tile(head_dim_bucket(p.head_dim));
  return ceil_div(p.seqlen_q, tile.rows) * p.heads * p.batch;
}

std::string fa2_supports(const FwdProblem& p) {
  std::string why = common_fwd_support(p);
  if (!why.empty()) return why;
  why = grid_support(fa2_blocks(p), "the query tiles");
  if (!why.empty()) return why;
  const size_t smem = size_t(simt_tile(head_dim_bucket(p.head_dim)).smem_bytes());
  const size_t limit = max_smem_optin(p.device.index);
  if (smem > limit)
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the device allows " +
           std::to_string(limit);
  return {};
}

void fa2_run(const FwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const int64_t blocks = fa2_blocks(p);
  if (blocks == 0) return;  // no query rows
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(p.head_dim, [&](auto bucket) {
      constexpr int kHeadDim = decltype(bucket)::value;
      constexpr SimtTile kTile = simt_tile(kHeadDim);
      const SimtArgs args = make_simt_args(p, kTile.rows);
      auto kernel = fa2_simt_fwd_kernel<T, kHeadDim>;
      const size_t smem = size_t(kTile.smem_bytes());
      allow_dynamic_smem(kernel, smem, p.device.index, "cuda_fa2_simt forward");
      kernel<<<grid_1d(blocks, "cuda_fa2_simt forward"), kSimtThreads, smem, static_cast<cudaStream_t>(stream)>>>(p,
                                                                                                                  args);
      FA_CUDA_CHECK_LAUNCH("cuda_fa2_simt forward");
    });
  });
}

}  // namespace

}  // namespace flashattn::detail::cuda::ladder

namespace flashattn::detail {

const Backend& cuda_fa2_simt_backend() {
  static const Backend b{"cuda_fa2_simt",
                         DeviceType::cuda,
                         cuda::ladder::fa2_supports,
                         cuda::ladder::fa2_run,
                         cuda::ladder::fa2_simt_supports_bwd,
                         cuda::ladder::fa2_simt_run_bwd};
  return b;
}

}  // namespace flashattn::detail
