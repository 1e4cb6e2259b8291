// cuda_fa2_simt backward on CUDA cores. Deterministic by construction (no atomics): every gradient
// element is summed by the one thread group that writes it. Three kernels on the call's stream:
//   1. delta = rowsum(dO * O) per (query row, head), into an fp32 workspace (total_q, heads);
//   2. dQ: one block per (query tile, head, sequence), shaped like the forward: a row keeps q, dO and its
//      dQ accumulator in registers while the K/V tiles it sees stream through shared memory;
//   3. dK, dV: one block per (key tile, kv head, sequence): a key row keeps k, v and its dK/dV
//      accumulators in registers while the Q/dO tiles of every query head of its GQA group stream
//      through shared memory, so the sum over the group needs no second pass.
// Kernels 2 and 3 both recompute P = exp(logit - LSE) from q, k and the forward's LSE: twice the
// Q.K^T work of a single-pass backward, in exchange for no dQ atomics and no dQ workspace.

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/philox.h"
#include "common/score.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/ladder/ladder.h"
#include "cuda/ladder/row_math.cuh"

namespace flashattn::detail::cuda::ladder {

namespace {

// Keys (dQ) or queries (dK/dV) scored per step: two score arrays of this size live in registers next to
// three or four head-dim accumulators, so it is half the forward's chunk. Dropout needs a multiple of 4.
constexpr int kBwdChunk = 8;
static_assert(kBwdChunk % 4 == 0 && kKeyChunk % kBwdChunk == 0, "chunks tile the K/V tiles, Philox blocks the chunks");
constexpr int kDeltaWarps = 8;
constexpr int64_t kDeltaMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this

struct BwdArgs {
  SimtArgs common;        // GQA group, dropout constants, K/V vector loads, query tiles
  int64_t key_tiles = 0;  // key tiles per sequence (dK/dV grid)
  bool q_vec16 = false, dout_vec16 = false;
};

BwdArgs make_bwd_args(const BwdProblem& p, const SimtTile& tile) {
  BwdArgs a;
  a.common = make_simt_args(p, tile.rows);
  a.key_tiles = ceil_div(p.seqlen_k, tile.rows);
  a.q_vec16 = rows_aligned16(p.q, dtype_size(p.dtype));
  a.dout_vec16 = rows_aligned16(p.dout, dtype_size(p.dtype));
  return a;
}

// Dynamic shared memory of the dK/dV kernel: Q and dO tiles of `keys` query rows, plus their LSE and delta.
constexpr int64_t dkdv_smem_bytes(const SimtTile& t) {
  return t.smem_bytes() + 2 * int64_t(t.keys) * int64_t(sizeof(float));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// One warp per (packed query row, head): delta = sum_d dO * O with O the forward's (rounded) output,
// as flash-attn does; it equals sum_j P_ij dP_ij of the exact softmax up to that rounding.
template <typename T>
__global__ void __launch_bounds__(kDeltaWarps * 32) fa2_simt_bwd_delta_kernel(const BwdProblem p, float* delta) {
  const int64_t warps = p.total_q * p.heads;
  const int64_t step = int64_t(gridDim.x) * kDeltaWarps;
  const int lane = threadIdx.x % 32;
  for (int64_t w = int64_t(blockIdx.x) * kDeltaWarps + threadIdx.x / 32; w < warps; w += step) {
    const int64_t h = w % p.heads;
    const TensorRow t = unpack_q_row(p, w / p.heads);
    const T* o = static_cast<const T*>(p.out.ptr) + p.out.offset(t.b, t.row, h);
    const T* g = static_cast<const T*>(p.dout.ptr) + p.dout.offset(t.b, t.row, h);
    float acc = 0.0f;
    for (int64_t d = lane; d < p.head_dim; d += 32) acc = fmaf(to_float(o[d]), to_float(g[d]), acc);
    acc = warp_sum(acc);
    if (lane == 0) delta[w] = acc;
  }
}

// Sums the lanes' partial dot products of each chunk element (see attend_tile for why every lane ends
// with the same bits). The closing __syncwarp() is a compiler barrier on shared memory: without it, and
// without shuffles (one lane per row), nvcc keeps the chunk's tile rows read for the dot products live
// until the accumulation reads them again, 8 rows x 32 dims of registers, and spills.
template <int kLanes>
__device__ __forceinline__ void reduce_chunk(float (&x)[kBwdChunk], float (&y)[kBwdChunk]) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) {
#pragma unroll
    for (int c = 0; c < kBwdChunk; ++c) {
      x[c] += __shfl_xor_sync(0xffffffffu, x[c], off);
      y[c] += __shfl_xor_sync(0xffffffffu, y[c], off);
    }
  }
  __syncwarp();
}

// Partial dot products of the lane's dims: a . row_a and b . row_b for one shared-memory row each. q.k
// goes through the forward's lane_dot (row_math.cuh), so that after the same lane reduction the logit is
// bitwise the one the forward's LSE was computed from, and P = exp(logit - LSE) is the forward's P.
template <int kHeadDim>
__device__ __forceinline__ void lane_dots(const float4* row_a, const float4* row_b,
                                          const float (&a)[Layout<kHeadDim>::kDims],
                                          const float (&b)[Layout<kHeadDim>::kDims], float& dot_a, float& dot_b) {
  dot_a = lane_dot<kHeadDim>(row_a, a);
  dot_b = lane_dot<kHeadDim>(row_b, b);
}

// acc += w * row over the lane's dims of one shared-memory row.
template <int kHeadDim>
__device__ __forceinline__ void lane_axpy(float w, const float4* row, float (&acc)[Layout<kHeadDim>::kDims]) {
  using L = Layout<kHeadDim>;
#pragma unroll
  for (int t = 0; t < L::kVecs; ++t) {
    const float4 x = row[t * L::kLanes];
    acc[4 * t] = fmaf(w, x.x, acc[4 * t]);
    acc[4 * t + 1] = fmaf(w, x.y, acc[4 * t + 1]);
    acc[4 * t + 2] = fmaf(w, x.z, acc[4 * t + 2]);
    acc[4 * t + 3] = fmaf(w, x.w, acc[4 * t + 3]);
  }
}

// d logit / d qk times dS for one visible element: dS = P * (dP - delta), dP = (dO . v) * z where z is
// the dropout factor (0 or 1 / (1 - p)); also returns P * z, the weight of dO in dV.
struct ElementGrad {
  float dqk, pz;
};
__device__ __forceinline__ ElementGrad element_grad(const ScoreMod<float>& mod, float qk, int64_t distance, float lse,
                                                    float dov, float delta, float z) {
  const float prob = expf(mod(qk, distance) - lse);
  return ElementGrad{prob * (dov * z - delta) * mod.dlogit_dqk(qk), prob * z};
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kSimtThreads, kSimtMinBlocks)
    fa2_simt_bwd_dq_kernel(const BwdProblem p, const BwdArgs a, const float* delta) {
  using L = Layout<kHeadDim>;
  extern __shared__ float4 smem[];
  float* ks = reinterpret_cast<float*>(smem);
  float* vs = ks + L::kKeys * kHeadDim;

  // Same block order as the forward: tiles of one head together, heaviest (causal) first.
  const int64_t bid = blockIdx.x;
  const int64_t q_tiles = a.common.q_tiles;
  const int64_t q_tile = q_tiles - 1 - bid % q_tiles;
  const int64_t h = (bid / q_tiles) % p.heads;
  const int64_t b = bid / q_tiles / p.heads;
  const SeqRange r = seq_range(p, b);
  const int64_t i0 = q_tile * L::kRows;
  if (i0 >= r.sq) return;  // the whole block

  const Mask mask = make_mask(p.score, r.sq, r.sk);
  const int row = threadIdx.x / L::kLanes;
  const int lane = threadIdx.x % L::kLanes;
  const int64_t i = i0 + row;
  const bool active = i < r.sq;
  const int head_dim = int(p.head_dim);
  const RowCtx ctx = make_row_ctx(p, a.common, mask, b, h, i, active);

  float q[L::kDims], dout[L::kDims], dq[L::kDims];
  float lse = 0.0f, row_delta = 0.0f;
#pragma unroll
  for (int d = 0; d < L::kDims; ++d) q[d] = dout[d] = dq[d] = 0.0f;
  if (active) {
    load_row<kHeadDim>(static_cast<const T*>(p.q.ptr) + p.q.offset(b, r.q_start + i, h), head_dim, lane, q);
    load_row<kHeadDim>(static_cast<const T*>(p.dout.ptr) + p.dout.offset(b, r.q_start + i, h), head_dim, lane, dout);
    lse = p.lse.ptr[p.lse.offset(b, r.q_start + i, h)];
    row_delta = delta[packed_q_row(p, r, b, i) * p.heads + h];
  }

  const int64_t last = (i0 + L::kRows < r.sq ? i0 + L::kRows : r.sq) - 1;
  const int64_t kv_begin = mask.key_begin(i0);
  const int64_t kv_end = mask.key_end(last);
  const int64_t hk = h / a.common.group;
  const T* k_base = static_cast<const T*>(p.k.ptr) + p.k.offset(b, r.k_start, hk);
  const T* v_base = static_cast<const T*>(p.v.ptr) + p.v.offset(b, r.k_start, hk);
  for (int64_t n0 = kv_begin / L::kKeys * L::kKeys; n0 < kv_end; n0 += L::kKeys) {
    const int n_valid = int(kv_end - n0 < L::kKeys ? kv_end - n0 : L::kKeys);
    __syncthreads();  // every row is done with the previous tile
    load_kv_tile<kHeadDim, L::kKeys>(k_base + n0 * p.k.row_stride, p.k.row_stride, n_valid, head_dim, a.common.k_vec16,
                                     ks);
    load_kv_tile<kHeadDim, L::kKeys>(v_base + n0 * p.v.row_stride, p.v.row_stride, n_valid, head_dim, a.common.v_vec16,
                                     vs);
    __syncthreads();
    const float4* k4 = reinterpret_cast<const float4*>(ks) + lane;
    const float4* v4 = reinterpret_cast<const float4*>(vs) + lane;
    for (int c0 = 0; c0 < n_valid; c0 += kBwdChunk) {
      float qk[kBwdChunk], dov[kBwdChunk];
#pragma unroll
      for (int c = 0; c < kBwdChunk; ++c)
        lane_dots<kHeadDim>(k4 + (c0 + c) * L::kRowVecs, v4 + (c0 + c) * L::kRowVecs, q, dout, qk[c], dov[c]);
      reduce_chunk<L::kLanes>(qk, dov);
      Philox4 words{};
#pragma unroll
      for (int c = 0; c < kBwdChunk; ++c) {
        const int64_t j = n0 + c0 + c;
        float z = 1.0f;
        if (ctx.dropout) {
          if (c % 4 == 0) words = dropout_words(ctx.drop, b, h, p.heads, i, j);
          z = philox_word(words, j) >= ctx.threshold ? ctx.keep_scale : 0.0f;
        }
        const bool visible = j >= ctx.key_begin && j < ctx.key_end;
        const float dqk =
            visible ? element_grad(ctx.mod, qk[c], ctx.diagonal - j, lse, dov[c], row_delta, z).dqk : 0.0f;
        lane_axpy<kHeadDim>(dqk, k4 + (c0 + c) * L::kRowVecs, dq);
      }
    }
  }
  if (active)
    store_row<kHeadDim>(static_cast<T*>(p.dq.ptr) + p.dq.offset(b, r.q_start + i, h), head_dim, lane, dq, 1.0f);
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kSimtThreads, kSimtMinBlocks)
    fa2_simt_bwd_dkdv_kernel(const BwdProblem p, const BwdArgs a, const float* delta) {
  using L = Layout<kHeadDim>;
  extern __shared__ float4 smem[];
  float* qs = reinterpret_cast<float*>(smem);  // [kKeys query rows][kHeadDim]
  float* dos = qs + L::kKeys * kHeadDim;       // [kKeys][kHeadDim]
  float* lse_s = dos + L::kKeys * kHeadDim;    // [kKeys]
  float* delta_s = lse_s + L::kKeys;           // [kKeys]

  // blockIdx.x = (b * heads_k + hk) * key_tiles + key tile. A block owns kRows keys (one per row group
  // of lanes) and walks query tiles of kKeys rows.
  const int64_t bid = blockIdx.x;
  const int64_t j0 = bid % a.key_tiles * L::kRows;
  const int64_t hk = (bid / a.key_tiles) % p.heads_k;
  const int64_t b = bid / a.key_tiles / p.heads_k;
  const SeqRange r = seq_range(p, b);
  if (j0 >= r.sk) return;  // the whole block

  const Mask mask = make_mask(p.score, r.sq, r.sk);
  const int row = threadIdx.x / L::kLanes;
  const int lane = threadIdx.x % L::kLanes;
  const int64_t j = j0 + row;
  const bool active = j < r.sk;
  const int64_t j_last = (j0 + L::kRows < r.sk ? j0 + L::kRows : r.sk) - 1;
  const int head_dim = int(p.head_dim);

  float k[L::kDims], v[L::kDims], dk[L::kDims], dv[L::kDims];
#pragma unroll
  for (int d = 0; d < L::kDims; ++d) k[d] = v[d] = dk[d] = dv[d] = 0.0f;
  if (active) {
    load_row<kHeadDim>(static_cast<const T*>(p.k.ptr) + p.k.offset(b, r.k_start + j, hk), head_dim, lane, k);
    load_row<kHeadDim>(static_cast<const T*>(p.v.ptr) + p.v.offset(b, r.k_start + j, hk), head_dim, lane, v);
  }

  const bool dropout = a.common.dropout;
  for (int64_t h = hk * a.common.group; h < (hk + 1) * a.common.group; ++h) {
    const ScoreMod<float> mod{p.score.softmax_scale, p.score.softcap, alibi_slope(p.score, b, h)};
    const T* q_base = static_cast<const T*>(p.q.ptr) + p.q.offset(b, r.q_start, h);
    const T* do_base = static_cast<const T*>(p.dout.ptr) + p.dout.offset(b, r.q_start, h);
    for (int64_t i0 = 0; i0 < r.sq; i0 += L::kKeys) {
      const int64_t i_last = (i0 + L::kKeys < r.sq ? i0 + L::kKeys : r.sq) - 1;
      // Same for the whole block: skip query tiles that see none of this block's keys (the tile's
      // rows see [key_begin(i0), key_end(i_last)), bounds non-decreasing in the row).
      if (mask.key_end(i_last) <= j0 || mask.key_begin(i0) > j_last) continue;
      const int n_valid = int(i_last - i0 + 1);
      __syncthreads();  // every row is done with the previous Q/dO tile
      load_kv_tile<kHeadDim, L::kKeys>(q_base + i0 * p.q.row_stride, p.q.row_stride, n_valid, head_dim, a.q_vec16, qs);
      load_kv_tile<kHeadDim, L::kKeys>(do_base + i0 * p.dout.row_stride, p.dout.row_stride, n_valid, head_dim,
                                       a.dout_vec16, dos);
      for (int t = threadIdx.x; t < L::kKeys; t += blockDim.x) {
        const bool in = t < n_valid;
        lse_s[t] = in ? p.lse.ptr[p.lse.offset(b, r.q_start + i0 + t, h)] : 0.0f;
        delta_s[t] = in ? delta[packed_q_row(p, r, b, i0 + t) * p.heads + h] : 0.0f;
      }
      __syncthreads();
      const float4* q4 = reinterpret_cast<const float4*>(qs) + lane;
      const float4* do4 = reinterpret_cast<const float4*>(dos) + lane;
      for (int c0 = 0; c0 < n_valid; c0 += kBwdChunk) {
        float qk[kBwdChunk], dov[kBwdChunk];
#pragma unroll
        for (int c = 0; c < kBwdChunk; ++c)
          lane_dots<kHeadDim>(q4 + (c0 + c) * L::kRowVecs, do4 + (c0 + c) * L::kRowVecs, k, v, qk[c], dov[c]);
        reduce_chunk<L::kLanes>(qk, dov);
#pragma unroll
        for (int c = 0; c < kBwdChunk; ++c) {
          const int64_t i = i0 + c0 + c;
          // Rows past n_valid are zero padding of the tile; the mask alone would not hide them.
          const bool visible = active && c0 + c < n_valid && mask.visible(i, j);
          ElementGrad g{0.0f, 0.0f};
          if (visible) {
            float z = 1.0f;
            if (dropout) {
              const bool keep =
                  philox_word(dropout_words(p.dropout, b, h, p.heads, i, j), j) >= a.common.drop_threshold;
              z = keep ? a.common.keep_scale : 0.0f;
            }
            g = element_grad(mod, qk[c], mask.diagonal(i) - j, lse_s[c0 + c], dov[c], delta_s[c0 + c], z);
          }
          lane_axpy<kHeadDim>(g.pz, do4 + (c0 + c) * L::kRowVecs, dv);
          lane_axpy<kHeadDim>(g.dqk, q4 + (c0 + c) * L::kRowVecs, dk);
        }
      }
    }
  }
  if (!active) return;
  store_row<kHeadDim>(static_cast<T*>(p.dk.ptr) + p.dk.offset(b, r.k_start + j, hk), head_dim, lane, dk, 1.0f);
  store_row<kHeadDim>(static_cast<T*>(p.dv.ptr) + p.dv.offset(b, r.k_start + j, hk), head_dim, lane, dv, 1.0f);
}

int64_t dq_blocks(const BwdProblem& p, const SimtTile& t) { return ceil_div(p.seqlen_q, t.rows) * p.heads * p.batch; }
int64_t dkdv_blocks(const BwdProblem& p, const SimtTile& t) {
  return ceil_div(p.seqlen_k, t.rows) * p.heads_k * p.batch;
}

}  // namespace

std::string fa2_simt_supports_bwd(const BwdProblem& p) {
  std::string why = common_fwd_support(p);
  if (!why.empty()) return why;
  const SimtTile tile = simt_tile(head_dim_bucket(p.head_dim));
  why = grid_support(dq_blocks(p, tile), "the dQ query tiles");
  if (why.empty()) why = grid_support(dkdv_blocks(p, tile), "the dK/dV key tiles");
  if (!why.empty()) return why;
  const size_t smem = size_t(dkdv_smem_bytes(tile));
  const size_t limit = max_smem_optin(p.device.index);
  if (smem > limit)
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the device allows " +
           std::to_string(limit);
  return {};
}

void fa2_simt_run_bwd(const BwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t rows = p.total_q * p.heads;
  Workspace workspace(size_t(rows) * sizeof(float), s);
  float* delta = workspace.as<float>();
  const SimtTile tile = simt_tile(head_dim_bucket(p.head_dim));
  const int64_t q_blocks = dq_blocks(p, tile), kv_blocks = dkdv_blocks(p, tile);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (rows > 0) {
      const int64_t blocks = std::min(ceil_div(rows, kDeltaWarps), kDeltaMaxBlocks);
      fa2_simt_bwd_delta_kernel<T>
          <<<grid_1d(blocks, "cuda_fa2_simt backward delta"), kDeltaWarps * 32, 0, s>>>(p, delta);
      FA_CUDA_CHECK_LAUNCH("cuda_fa2_simt backward delta");
    }
    dispatch_head_dim(p.head_dim, [&](auto bucket) {
      constexpr int kHeadDim = decltype(bucket)::value;
      constexpr SimtTile kTile = simt_tile(kHeadDim);
      const BwdArgs args = make_bwd_args(p, kTile);
      if (q_blocks > 0) {
        auto kernel = fa2_simt_bwd_dq_kernel<T, kHeadDim>;
        const size_t smem = size_t(kTile.smem_bytes());
        allow_dynamic_smem(kernel, smem, p.device.index, "cuda_fa2_simt backward dQ");
        kernel<<<grid_1d(q_blocks, "cuda_fa2_simt backward dQ"), kSimtThreads, smem, s>>>(p, args, delta);
        FA_CUDA_CHECK_LAUNCH("cuda_fa2_simt backward dQ");
      }
      if (kv_blocks > 0) {
        auto kernel = fa2_simt_bwd_dkdv_kernel<T, kHeadDim>;
        const size_t smem = size_t(dkdv_smem_bytes(kTile));
        allow_dynamic_smem(kernel, smem, p.device.index, "cuda_fa2_simt backward dK/dV");
        kernel<<<grid_1d(kv_blocks, "cuda_fa2_simt backward dK/dV"), kSimtThreads, smem, s>>>(p, args, delta);
        FA_CUDA_CHECK_LAUNCH("cuda_fa2_simt backward dK/dV");
      }
    });
  });
}

}  // namespace flashattn::detail::cuda::ladder
