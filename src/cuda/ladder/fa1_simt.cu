// cuda_fa1_simt: FlashAttention-1 forward on CUDA cores, kept in the paper's loop order.
//
// One block per (head, sequence). The outer loop walks the K/V tiles, staging each in shared memory
// once; the inner loop walks the query tiles, and every row reloads its q, output accumulator and
// softmax statistics (m, l) from a global fp32 workspace, folds the tile in with row_math.cuh, and
// writes them back. A second kernel divides by l and writes out and the LSE. The workspace traffic per
// K/V tile is what FlashAttention-2 removed by swapping the loops; this backend keeps it to show the gain.

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "api/backends.h"
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

// Workspace of one call: the unnormalised output (total_q, heads, head_dim) and the pairs (m, l) of
// (total_q, heads), fp32. Zero-filled means empty: a row with l == 0 has seen no visible key and its m
// is read as -inf.
struct Fa1Workspace {
  float* o = nullptr;
  float* ml = nullptr;
};

int64_t fa1_o_floats(const FwdProblem& p) { return p.total_q * p.heads * p.head_dim; }
int64_t fa1_ml_floats(const FwdProblem& p) { return p.total_q * p.heads * 2; }
constexpr int64_t kMaxWorkspaceBytes = int64_t(8) << 30;
constexpr int kFinalizeThreads = 256;
constexpr int64_t kFinalizeMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kSimtThreads, kSimtMinBlocks)
    fa1_simt_accumulate_kernel(const FwdProblem p, const SimtArgs a, Fa1Workspace ws) {
  using L = Layout<kHeadDim>;
  extern __shared__ float4 smem[];
  float* ks = reinterpret_cast<float*>(smem);
  float* vs = ks + L::kKeys * kHeadDim;

  const int64_t h = blockIdx.x % p.heads;
  const int64_t b = blockIdx.x / p.heads;
  const SeqRange r = seq_range(p, b);
  if (r.sq == 0) return;  // the whole block

  const Mask mask = make_mask(p.score, r.sq, r.sk);
  const int row = threadIdx.x / L::kLanes;
  const int lane = threadIdx.x % L::kLanes;
  const int head_dim = int(p.head_dim);
  const int64_t hk = h / a.group;
  const T* k_base = static_cast<const T*>(p.k.ptr) + p.k.offset(b, r.k_start, hk);
  const T* v_base = static_cast<const T*>(p.v.ptr) + p.v.offset(b, r.k_start, hk);
  // Keys any row sees (bounds are non-decreasing in the row); tiles start on multiples of kKeys.
  const int64_t kv_begin = mask.key_begin(0);
  const int64_t kv_end = mask.key_end(r.sq - 1);

  for (int64_t n0 = kv_begin / L::kKeys * L::kKeys; n0 < kv_end; n0 += L::kKeys) {
    const int n_valid = int(kv_end - n0 < L::kKeys ? kv_end - n0 : L::kKeys);
    __syncthreads();  // every row is done with the previous tile
    load_kv_tile<kHeadDim, L::kKeys>(k_base + n0 * p.k.row_stride, p.k.row_stride, n_valid, head_dim, a.k_vec16, ks);
    load_kv_tile<kHeadDim, L::kKeys>(v_base + n0 * p.v.row_stride, p.v.row_stride, n_valid, head_dim, a.v_vec16, vs);
    __syncthreads();

    for (int64_t i0 = 0; i0 < r.sq; i0 += L::kRows) {
      const int64_t last = (i0 + L::kRows < r.sq ? i0 + L::kRows : r.sq) - 1;
      // Same for the whole block: skip query tiles that see none of this K/V tile.
      if (mask.key_end(last) <= n0 || mask.key_begin(i0) >= n0 + n_valid) continue;
      const int64_t i = i0 + row;
      const bool active = i < r.sq;
      const RowCtx ctx = make_row_ctx(p, a, mask, b, h, i, active);
      const int64_t state = active ? packed_q_row(p, r, b, i) * p.heads + h : 0;
      float* o_ws = ws.o + state * p.head_dim;

      float q[L::kDims];
      RowAcc<L::kDims> acc;
      if (active) {
        load_row<kHeadDim>(static_cast<const T*>(p.q.ptr) + p.q.offset(b, r.q_start + i, h), head_dim, lane, q);
        load_row<kHeadDim>(o_ws, head_dim, lane, acc.o);
        acc.l = ws.ml[2 * state + 1];
        acc.m = acc.l > 0.0f ? ws.ml[2 * state] : -INFINITY;
      } else {
#pragma unroll
        for (int d = 0; d < L::kDims; ++d) q[d] = acc.o[d] = 0.0f;
        acc.m = -INFINITY;
        acc.l = 0.0f;
      }
      attend_tile<kHeadDim>(ks, vs, n0, n_valid, lane, q, acc, ctx);
      if (active) {
        // A workspace row belongs to this row's lanes alone, and each lane reloads only the dims it
        // stored. m and l are stored by lane 0 and reloaded by every lane at the next K/V tile: the
        // __syncthreads() at the top of that iteration makes the store visible.
        store_row<kHeadDim>(o_ws, head_dim, lane, acc.o, 1.0f);
        if (lane == 0) {
          ws.ml[2 * state] = acc.m;
          ws.ml[2 * state + 1] = acc.l;
        }
      }
    }
  }
}

// out = o / l and LSE = m + log(l) (0 and +inf for rows that saw no key), one thread per output element.
template <typename T>
__global__ void fa1_simt_finalize_kernel(const FwdProblem p, Fa1Workspace ws) {
  const int64_t total = p.total_q * p.heads * p.head_dim;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t d = idx % p.head_dim;
    const int64_t state = idx / p.head_dim;  // packed row * heads + h
    const int64_t h = state % p.heads;
    const TensorRow t = unpack_q_row(p, state / p.heads);
    const float m = ws.ml[2 * state], l = ws.ml[2 * state + 1];
    static_cast<T*>(p.out.ptr)[p.out.offset(t.b, t.row, h) + d] = from_float<T>(ws.o[idx] * row_out_scale(l));
    if (d == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(t.b, t.row, h)] = row_lse(m, l);
  }
}

std::string fa1_supports(const FwdProblem& p) {
  std::string why = common_fwd_support(p);
  if (!why.empty()) return why;
  why = grid_support(p.batch * p.heads, "one block per (sequence, head)");
  if (!why.empty()) return why;
  const int64_t bytes = (fa1_o_floats(p) + fa1_ml_floats(p)) * int64_t(sizeof(float));
  if (bytes > kMaxWorkspaceBytes)
    return "needs a " + std::to_string(bytes) + "-byte fp32 workspace, above the 8 GiB bound";
  const size_t smem = size_t(simt_tile(head_dim_bucket(p.head_dim)).smem_bytes());
  const size_t limit = max_smem_optin(p.device.index);
  if (smem > limit)
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the device allows " +
           std::to_string(limit);
  return {};
}

void fa1_run(const FwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const int64_t o_floats = fa1_o_floats(p), ml_floats = fa1_ml_floats(p);
  if (o_floats == 0) return;  // no query rows
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t bytes = size_t(o_floats + ml_floats) * sizeof(float);
  Workspace workspace(bytes, s);
  Fa1Workspace ws{workspace.as<float>(), workspace.as<float>() + o_floats};
  FA_CUDA_CHECK(cudaMemsetAsync(ws.o, 0, bytes, s));
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(p.head_dim, [&](auto bucket) {
      constexpr int kHeadDim = decltype(bucket)::value;
      constexpr SimtTile kTile = simt_tile(kHeadDim);
      const SimtArgs args = make_simt_args(p, kTile.rows);
      auto kernel = fa1_simt_accumulate_kernel<T, kHeadDim>;
      const size_t smem = size_t(kTile.smem_bytes());
      allow_dynamic_smem(kernel, smem, p.device.index, "cuda_fa1_simt accumulate");
      kernel<<<grid_1d(p.batch * p.heads, "cuda_fa1_simt accumulate"), kSimtThreads, smem, s>>>(p, args, ws);
      FA_CUDA_CHECK_LAUNCH("cuda_fa1_simt accumulate");
    });
    const int64_t blocks = std::min(ceil_div(o_floats, kFinalizeThreads), kFinalizeMaxBlocks);
    fa1_simt_finalize_kernel<T><<<grid_1d(blocks, "cuda_fa1_simt finalize"), kFinalizeThreads, 0, s>>>(p, ws);
    FA_CUDA_CHECK_LAUNCH("cuda_fa1_simt finalize");
  });
}

}  // namespace

}  // namespace flashattn::detail::cuda::ladder

namespace flashattn::detail {

const Backend& cuda_fa1_simt_backend() {
  static const Backend b{"cuda_fa1_simt", DeviceType::cuda, cuda::ladder::fa1_supports, cuda::ladder::fa1_run};
  return b;
}

}  // namespace flashattn::detail
