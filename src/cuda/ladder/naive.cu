// cuda_naive: attention with the score matrix materialised in global memory, the baseline of the ladder
// (and of the benchmark's speedup column). Three kernels on the call's stream:
//   1. S = mod(Q K^T) for every visible (i, j), -inf where masked      (16 x 16 tiled product)
//   2. per row: LSE = log-sum-exp of S, S <- dropout(exp(S - LSE))      (one warp per row)
//   3. O = P V                                                          (16 x 16 tiled product)
// The fp32 workspace holds S for every (sequence, head) padded to (seqlen_q, seqlen_k), the maxima when
// varlen: B * H * Sq * Sk floats, so problems needing more than kMaxWorkspaceBytes are declined.

#include <cuda_runtime.h>

#include <string>

#include "api/backends.h"
#include "common/philox.h"
#include "common/score.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/elem.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/ladder/ladder.h"

namespace flashattn::detail::cuda::ladder {

namespace {

constexpr int kTile = 16;  // rows x columns of a block in the two products
constexpr int kProductThreads = kTile * kTile;
constexpr int kSoftmaxWarps = 8;  // rows per block in the softmax kernel
constexpr int64_t kMaxWorkspaceBytes = int64_t(8) << 30;

struct NaiveArgs {
  SimtArgs common;  // GQA group and dropout constants
  int64_t row_tiles = 0, key_tiles = 0, dim_tiles = 0;
  int64_t rows = 0;  // B * H * seqlen_q: rows of the score matrix
};

NaiveArgs make_naive_args(const FwdProblem& p) {
  NaiveArgs a;
  a.common = make_simt_args(p, kTile);
  a.row_tiles = ceil_div(p.seqlen_q, kTile);
  a.key_tiles = ceil_div(p.seqlen_k, kTile);
  a.dim_tiles = ceil_div(p.head_dim, kTile);
  a.rows = p.batch * p.heads * p.seqlen_q;
  return a;
}

// Row (b, h, i) of the score matrix starts at ((b * heads + h) * seqlen_q + i) * seqlen_k.
__device__ __forceinline__ int64_t score_row(const FwdProblem& p, int64_t b, int64_t h, int64_t i) {
  return ((b * p.heads + h) * p.seqlen_q + i) * p.seqlen_k;
}

template <typename T>
__global__ void __launch_bounds__(kProductThreads)
    naive_scores_kernel(const FwdProblem p, const NaiveArgs a, float* scores) {
  __shared__ float qs[kTile][kTile + 1];  // +1: column reads of ks hit distinct banks
  __shared__ float ks[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t bid = blockIdx.x;
  const int64_t j0 = bid % a.key_tiles * kTile;
  const int64_t i0 = bid / a.key_tiles % a.row_tiles * kTile;
  const int64_t bh = bid / a.key_tiles / a.row_tiles;
  const int64_t h = bh % p.heads, b = bh / p.heads;
  const SeqRange r = seq_range(p, b);
  if (i0 >= r.sq || j0 >= r.sk) return;  // the whole block
  const int64_t hk = h / a.common.group;
  const bool q_in = i0 + ty < r.sq, k_in = j0 + ty < r.sk;
  const T* q_row = static_cast<const T*>(p.q.ptr) + (q_in ? p.q.offset(b, r.q_start + i0 + ty, h) : 0);
  const T* k_row = static_cast<const T*>(p.k.ptr) + (k_in ? p.k.offset(b, r.k_start + j0 + ty, hk) : 0);
  // Four interleaved chains (dims d % 4) added pairwise at the end, as the SIMT kernels' lane_dot: with
  // logits of ~1e3 (softmax_scale -1 in the numerics tests) one chain of head_dim FMAs rounds two nearby
  // logits' difference badly enough (1e-4) to put out outside flash-attn's criterion.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t d0 = 0; d0 < p.head_dim; d0 += kTile) {
    const bool d_in = d0 + tx < p.head_dim;
    qs[ty][tx] = q_in && d_in ? to_float(q_row[d0 + tx]) : 0.0f;
    ks[ty][tx] = k_in && d_in ? to_float(k_row[d0 + tx]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTile; ++c) acc[c % 4] = fmaf(qs[ty][c], ks[tx][c], acc[c % 4]);
    __syncthreads();
  }
  const float qk = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  const int64_t i = i0 + ty, j = j0 + tx;
  if (i >= r.sq || j >= r.sk) return;
  const Mask mask = make_mask(p.score, r.sq, r.sk);
  const ScoreMod<float> mod{p.score.softmax_scale, p.score.softcap, alibi_slope(p.score, b, h)};
  scores[score_row(p, b, h, i) + j] = mask.visible(i, j) ? mod(qk, mask.diagonal(i) - j) : -INFINITY;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// One warp per score row: LSE of the row, then the row is overwritten with the dropped, rescaled
// probabilities that kernel 3 multiplies with V. Rows with no visible key get P = 0 and LSE = +inf.
__global__ void __launch_bounds__(kSoftmaxWarps * 32)
    naive_softmax_kernel(const FwdProblem p, const NaiveArgs a, float* scores) {
  const int64_t row = int64_t(blockIdx.x) * kSoftmaxWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;  // the whole warp
  const int64_t i = row % p.seqlen_q;
  const int64_t h = row / p.seqlen_q % p.heads;
  const int64_t b = row / p.seqlen_q / p.heads;
  const SeqRange r = seq_range(p, b);
  if (i >= r.sq) return;  // the whole warp
  float* s = scores + score_row(p, b, h, i);
  float m = -INFINITY;
  bool nan_logit = false;
  for (int64_t j = lane; j < r.sk; j += 32) {
    m = fmaxf(m, s[j]);
    nan_logit = nan_logit || s[j] != s[j];
  }
  m = warp_max(m);
  // A NaN logit makes the row NaN (docs/reliability.md); fmaxf alone would drop it, and a row of NaN
  // logits would look empty.
  if (__any_sync(0xffffffffu, nan_logit)) m = NAN;
  float lse = INFINITY, sum = 0.0f;
  if (m != -INFINITY) {
    for (int64_t j = lane; j < r.sk; j += 32) sum += expf(s[j] - m);
    sum = warp_sum(sum);
    lse = m + logf(sum);
  }
  for (int64_t j = lane; j < r.sk; j += 32) {
    // exp(s - m) / sum, not exp(s - lse): with logits of ~1e3 (softmax_scale -1 in the numerics tests)
    // lse carries an fp32 rounding of up to 3e-5, which would scale every probability of the row by as
    // much and put out outside flash-attn's criterion; s - m is exact when s is near the maximum.
    float prob = m != -INFINITY ? expf(s[j] - m) / sum : 0.0f;
    if (a.common.dropout) {
      const bool keep = philox_word(dropout_words(p.dropout, b, h, p.heads, i, j), j) >= a.common.drop_threshold;
      prob = keep ? prob * a.common.keep_scale : 0.0f;
    }
    s[j] = prob;
  }
  if (lane == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, r.q_start + i, h)] = lse;
}

template <typename T>
__global__ void __launch_bounds__(kProductThreads)
    naive_pv_kernel(const FwdProblem p, const NaiveArgs a, const float* probs) {
  __shared__ float ps[kTile][kTile + 1];
  __shared__ float vs[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t bid = blockIdx.x;
  const int64_t d0 = bid % a.dim_tiles * kTile;
  const int64_t i0 = bid / a.dim_tiles % a.row_tiles * kTile;
  const int64_t bh = bid / a.dim_tiles / a.row_tiles;
  const int64_t h = bh % p.heads, b = bh / p.heads;
  const SeqRange r = seq_range(p, b);
  if (i0 >= r.sq) return;  // the whole block
  const int64_t hk = h / a.common.group;
  const int64_t i = i0 + ty, d = d0 + tx;
  const bool p_in = i < r.sq;
  const float* p_row = probs + (p_in ? score_row(p, b, h, i) : 0);
  float acc = 0.0f;
  for (int64_t j0 = 0; j0 < r.sk; j0 += kTile) {
    ps[ty][tx] = p_in && j0 + tx < r.sk ? p_row[j0 + tx] : 0.0f;
    const bool v_in = j0 + ty < r.sk && d < p.head_dim;
    vs[ty][tx] = v_in ? to_float(static_cast<const T*>(p.v.ptr)[p.v.offset(b, r.k_start + j0 + ty, hk) + d]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTile; ++c) acc = fmaf(ps[ty][c], vs[c][tx], acc);
    __syncthreads();
  }
  if (p_in && d < p.head_dim) static_cast<T*>(p.out.ptr)[p.out.offset(b, r.q_start + i, h) + d] = from_float<T>(acc);
}

int64_t workspace_bytes(const FwdProblem& p) {
  return p.batch * p.heads * p.seqlen_q * p.seqlen_k * int64_t(sizeof(float));
}

std::string naive_supports(const FwdProblem& p) {
  std::string why = common_fwd_support(p);
  if (!why.empty()) return why;
  // In floating point: the product of four int64 sizes may not fit int64.
  const double bytes = double(p.batch) * double(p.heads) * double(p.seqlen_q) * double(p.seqlen_k) * sizeof(float);
  if (bytes > double(kMaxWorkspaceBytes))
    return "the materialised score matrix needs " + std::to_string(bytes / double(1 << 30)) +
           " GiB of workspace, above the 8 GiB bound";
  const NaiveArgs a = make_naive_args(p);
  why = grid_support(ceil_div(a.rows, kSoftmaxWarps), "the softmax rows");
  if (why.empty()) why = grid_support(p.batch * p.heads * a.row_tiles * a.key_tiles, "the score tiles");
  if (why.empty()) why = grid_support(p.batch * p.heads * a.row_tiles * a.dim_tiles, "the output tiles");
  return why;
}

void naive_run(const FwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const NaiveArgs a = make_naive_args(p);
  if (a.rows == 0) return;  // no query rows
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  Workspace workspace(size_t(workspace_bytes(p)), s);
  float* scores = workspace.as<float>();
  const int64_t bh = p.batch * p.heads;
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.key_tiles > 0) {
      naive_scores_kernel<T>
          <<<grid_1d(bh * a.row_tiles * a.key_tiles, "cuda_naive scores"), kProductThreads, 0, s>>>(p, a, scores);
      FA_CUDA_CHECK_LAUNCH("cuda_naive scores");
    }
    naive_softmax_kernel<<<grid_1d(ceil_div(a.rows, kSoftmaxWarps), "cuda_naive softmax"), kSoftmaxWarps * 32, 0, s>>>(
        p, a, scores);
    FA_CUDA_CHECK_LAUNCH("cuda_naive softmax");
    naive_pv_kernel<T>
        <<<grid_1d(bh * a.row_tiles * a.dim_tiles, "cuda_naive P.V"), kProductThreads, 0, s>>>(p, a, scores);
    FA_CUDA_CHECK_LAUNCH("cuda_naive P.V");
  });
}

}  // namespace

}  // namespace flashattn::detail::cuda::ladder

namespace flashattn::detail {

const Backend& cuda_naive_backend() {
  static const Backend b{"cuda_naive", DeviceType::cuda, cuda::ladder::naive_supports, cuda::ladder::naive_run};
  return b;
}

}  // namespace flashattn::detail
