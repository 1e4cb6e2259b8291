// The cuda_sm70 backend: FlashAttention-2 forward, backward and KV-cache forward on Volta's tensor cores
// (mma.sync.m8n8k4, fwd_kernel.cuh, bwd_kernel.cuh) for compute capability 7.0 and newer, f16 only (Volta has no bf16
// tensor-core instruction), head dims up to 256 (the dispatcher pads those that are not multiples of 8). The kernel
// uses only sm_70 instructions, so this file, built for the architectures of FLASHATTN_CUDA_ARCHS (80 and 90a by
// default: CUDA 13 compiles nothing older than sm_75), runs the same code on any later GPU when the call names the
// backend; a Volta GPU runs the build's sm_70 image of the same kernel (image.h).
//
// The dispatcher reaches it on a V100 by default (the other CUDA backends decline compute capability 7.x); on later
// GPUs it comes after the backends for them in the registry, so it runs only what they decline or what names it.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "api/backends.h"
#include "cuda/attn/append_rotary.cuh"
#include "cuda/attn/bwd_prepost.cuh"
#include "cuda/attn/head_dim.h"
#include "cuda/attn/score_args.h"
#include "cuda/attn/switch.h"
#include "cuda/common/alignment.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/device_props.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/sm70/bwd_kernel.cuh"
#include "cuda/sm70/bwd_tile.h"
#include "cuda/sm70/fwd_kernel.cuh"
#include "cuda/sm70/fwd_tile.h"
#include "cuda/sm70/image.h"

namespace flashattn::detail::cuda::sm70 {

namespace {

// One kernel launch with one argument, `args`: the library's kernel or the sm_70 image's (image.h).
template <typename Args>
void launch(const void* compiled, const std::string& image_name, int64_t blocks, int threads, size_t smem, Args& args,
            int device, cudaStream_t stream, const char* what) {
  void* params[] = {&args};
  launch_kernel(compiled, image_name.c_str(), device, grid_1d(blocks, what), dim3(threads), smem, params, stream, what);
}

std::string bucket_name(const char* kernel, int bucket) { return std::string(kernel) + std::to_string(bucket); }

// The append + rotary step of a KV-cache call with an f16 cache (the image's flashattn_sm70_append_rotary).
__global__ void __launch_bounds__(32 * attn::kAppendWarps) append_rotary_kernel(const KVCacheProblem p, __half* q_rot) {
  attn::append_rotary_row<__half, __half>(p, q_rot, int(blockIdx.x) * attn::kAppendWarps + int(threadIdx.x) / 32,
                                          int(threadIdx.x) % 32);
}

int64_t fwd_blocks(const FwdProblem& p) { return ceil_div(p.seqlen_q, FwdTile::kBlockM) * p.heads * p.batch; }
int64_t kv_blocks(const FwdProblem& p) { return ceil_div(p.seqlen_k, BwdTile::kRows) * p.heads_k * p.batch; }

// The dtype, device and head-dim conditions of every cuda_sm70 call; `smem` is the largest shared-memory
// footprint of the call's kernels.
std::string kernel_reason(DType dtype, int device, int64_t head_dim, int64_t smem) {
  if (dtype == DType::bf16)
    return "dtype bf16: Volta's tensor cores take f16 only (mma.m8n8k4 has no bf16 form); cuda_sm80 and the "
           "SIMT backends run bf16";
  if (dtype != DType::f16) return std::string("dtype ") + dtype_name(dtype) + " (f16 only)";
  const DeviceProps& d = device_props(device);
  if (!d.error.empty()) return d.error;
  if (d.major < 7)
    return "needs compute capability >= 7.0, cuda:" + std::to_string(device) + " is " + std::to_string(d.major) + "." +
           std::to_string(d.minor);
  if (head_dim > attn::kMaxHeadDim || head_dim % 8 != 0)
    return "head_dim " + std::to_string(head_dim) + " (a multiple of 8 up to 256)";
  const int bucket = attn::head_dim_bucket(head_dim);
  if (!attn::head_dim_compiled(bucket))
    return "head_dim bucket " + std::to_string(bucket) + " not compiled (FLASHATTN_HEAD_DIMS)";
  if (smem > d.smem_optin)
    return "needs " + std::to_string(smem) + " bytes of shared memory per CTA, cuda:" + std::to_string(device) +
           " allows " + std::to_string(d.smem_optin);
  return {};
}

// What forward and backward share.
std::string common_reason(const FwdProblem& p, int64_t smem) {
  if (std::string r = kernel_reason(p.dtype, p.device.index, p.head_dim, smem); !r.empty()) return r;
  // Sequence positions are int inside the kernels (tile indices, in-tile offsets).
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 256;
  if (p.seqlen_q > kMaxSeq || p.seqlen_k > kMaxSeq) return "sequence length above 2^31 - 257";
  for (const auto& [view, name] :
       {std::pair{p.q, "q"}, std::pair{p.k, "k"}, std::pair{p.v, "v"}, std::pair{p.out, "out"}})
    if (std::string r = unaligned16_reason(name, view, 2); !r.empty()) return r;
  return {};
}

std::string grid_reason(int64_t blocks, const char* what) {
  if (blocks <= kMaxGridX) return {};
  return std::string(what) + " need " + std::to_string(blocks) + " CTAs, above the grid limit 2^31 - 1";
}

std::string supports_fwd(const FwdProblem& p) {
  const int bucket = attn::head_dim_bucket(p.head_dim);
  if (std::string r = common_reason(p, fwd_tile(bucket).smem_bytes()); !r.empty()) return r;
  return grid_reason(fwd_blocks(p), "the query tiles");
}

std::string supports_bwd(const BwdProblem& p) {
  const BwdTile t = bwd_tile(attn::head_dim_bucket(p.head_dim));
  const int64_t smem = t.kv_smem_bytes() > t.dq_smem_bytes() ? t.kv_smem_bytes() : t.dq_smem_bytes();
  if (std::string r = common_reason(p, smem); !r.empty()) return r;
  for (const auto& [view, name] :
       {std::pair{p.dout, "dout"}, std::pair{p.dq, "dq"}, std::pair{p.dk, "dk"}, std::pair{p.dv, "dv"}})
    if (std::string r = unaligned16_reason(name, view, 2); !r.empty()) return r;
  if (std::string r = grid_reason(fwd_blocks(p), "the query tiles"); !r.empty()) return r;
  return grid_reason(kv_blocks(p), "the key tiles");
}

void run_fwd(const FwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const int64_t blocks = fwd_blocks(p);
  if (blocks == 0) return;  // no query rows
  FwdArgs args;
  args.p = p;
  args.s = attn::make_score_args(p);
  args.num_m_blocks = int(ceil_div(p.seqlen_q, FwdTile::kBlockM));
  attn::head_dim_switch(attn::head_dim_bucket(p.head_dim), [&](auto bucket) {
    constexpr int kHeadDim = decltype(bucket)::value;
    launch(reinterpret_cast<const void*>(fwd_kernel<kHeadDim>), bucket_name("flashattn_sm70_fwd_d", kHeadDim), blocks,
           FwdTile::kThreads, size_t(fwd_tile(kHeadDim).smem_bytes()), args, p.device.index,
           static_cast<cudaStream_t>(stream), "cuda_sm70 forward");
  });
}

// D = rowsum(dO * O) (attn::bwd_dsum), then the dK/dV kernel (twice above head dim 128: dV, then dK) and
// the dQ kernel (bwd_kernel.cuh). No atomics: every gradient element is written by one CTA, so the
// deterministic mode is the only mode.
void run_bwd(const BwdProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int device = p.device.index;
  BwdArgs args;
  args.p = p;
  args.s = attn::make_score_args(p);
  args.num_n_blocks = int(ceil_div(p.seqlen_k, BwdTile::kRows));
  args.num_m_blocks = int(ceil_div(p.seqlen_q, BwdTile::kRows));
  const int64_t rows = p.total_q * p.heads;  // (query row, head) pairs
  Workspace dsum(size_t(rows) * sizeof(float), s);
  args.dsum = dsum.as<float>();
  if (rows > 0)
    launch(reinterpret_cast<const void*>(attn::bwd_dsum_kernel<__half>), "flashattn_sm70_bwd_dsum",
           ceil_div(rows, attn::kPrepostThreads / 32), attn::kPrepostThreads, 0, args, device, s,
           "cuda_sm70 backward D");
  attn::head_dim_switch(attn::head_dim_bucket(p.head_dim), [&](auto bucket) {
    constexpr int kHeadDim = decltype(bucket)::value;
    constexpr BwdTile kTile = bwd_tile(kHeadDim);
    const size_t kv_smem = size_t(kTile.kv_smem_bytes()), dq_smem = size_t(kTile.dq_smem_bytes());
    if (const int64_t blocks = kv_blocks(p); blocks > 0) {
      if constexpr (kTile.split_passes()) {
        launch(reinterpret_cast<const void*>(bwd_kv_kernel<kHeadDim, true, false>),
               bucket_name("flashattn_sm70_bwd_kv_dv_d", kHeadDim), blocks, BwdTile::kThreads, kv_smem, args, device, s,
               "cuda_sm70 backward dV");
        launch(reinterpret_cast<const void*>(bwd_kv_kernel<kHeadDim, false, true>),
               bucket_name("flashattn_sm70_bwd_kv_dk_d", kHeadDim), blocks, BwdTile::kThreads, kv_smem, args, device, s,
               "cuda_sm70 backward dK");
      } else {
        launch(reinterpret_cast<const void*>(bwd_kv_kernel<kHeadDim, true, true>),
               bucket_name("flashattn_sm70_bwd_kv_d", kHeadDim), blocks, BwdTile::kThreads, kv_smem, args, device, s,
               "cuda_sm70 backward dK/dV");
      }
    }
    if (const int64_t blocks = fwd_blocks(p); blocks > 0)
      launch(reinterpret_cast<const void*>(bwd_dq_kernel<kHeadDim>), bucket_name("flashattn_sm70_bwd_dq_d", kHeadDim),
             blocks, BwdTile::kThreads, dq_smem, args, device, s, "cuda_sm70 backward dQ");
  });
}

// flash_attn_with_kvcache: the append + rotary kernel (attn/append_rotary.cuh) when there are new tokens or
// rotary, then the forward kernel over the cache's rows (fwd_rows.h, CacheRows). One CTA per query tile
// and head, no split over the keys: a decode step of batch 1 fills few SMs (docs/kernels.md).
std::string supports_kvcache(const KVCacheProblem& p) {
  if (p.cache_dtype != p.dtype) return std::string("a ") + dtype_name(p.cache_dtype) + " cache (f16 caches only)";
  const int64_t smem = fwd_tile(attn::head_dim_bucket(p.head_dim)).smem_bytes();
  if (std::string r = kernel_reason(p.dtype, p.device.index, p.head_dim, smem); !r.empty()) return r;
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max() - 256;
  const CacheView& c = p.cache;
  if (p.seqlen_q > kMaxRows || c.capacity > kMaxRows || c.page_size > kMaxRows)
    return "seqlen_q, cache capacity or page_size above 2^31 - 257";
  if (p.batch * (p.seqlen_new * p.heads_k + p.seqlen_q * p.heads) > kMaxRows)
    return "batch * (seqlen_new * heads_k + seqlen_q * heads) rows to append or rotate above 2^31 - 257";
  if (std::string r = grid_reason(ceil_div(p.seqlen_q, FwdTile::kBlockM) * p.heads * p.batch, "the query tiles");
      !r.empty())
    return r;
  return kvcache_alignment_reason(p, 2);
}

void run_kvcache(const KVCacheProblem& p, Stream stream) {
  DeviceGuard guard(p.device);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int device = p.device.index;
  const bool rotary = p.rotary.cos != nullptr;
  Workspace q_rot(rotary ? size_t(p.batch * p.seqlen_q * p.heads * p.head_dim) * 2 : 0, s, p.workspace_allocator,
                  p.workspace_context);
  CacheArgs args;
  args.p = p;
  args.s = attn::make_score_args(p);
  args.q_rot = rotary ? q_rot.as<__half>() : nullptr;
  args.num_m_blocks = int(ceil_div(p.seqlen_q, FwdTile::kBlockM));
  const int64_t append_rows = p.batch * p.seqlen_new * p.heads_k + (rotary ? p.batch * p.seqlen_q * p.heads : 0);
  if (append_rows > 0) {
    KVCacheProblem append = p;
    __half* q_out = rotary ? q_rot.as<__half>() : nullptr;
    void* params[] = {&append, &q_out};
    launch_kernel(reinterpret_cast<const void*>(append_rotary_kernel), "flashattn_sm70_append_rotary", device,
                  grid_1d(ceil_div(append_rows, attn::kAppendWarps), "cuda_sm70 append"), dim3(32 * attn::kAppendWarps),
                  0, params, s, "cuda_sm70 append");
  }
  const int64_t blocks = ceil_div(p.seqlen_q, FwdTile::kBlockM) * p.heads * p.batch;
  if (blocks == 0) return;
  attn::head_dim_switch(attn::head_dim_bucket(p.head_dim), [&](auto bucket) {
    constexpr int kHeadDim = decltype(bucket)::value;
    launch(reinterpret_cast<const void*>(cache_kernel<kHeadDim>), bucket_name("flashattn_sm70_cache_d", kHeadDim),
           blocks, FwdTile::kThreads, size_t(fwd_tile(kHeadDim).smem_bytes()), args, device, s,
           "cuda_sm70 KV-cache forward");
  });
}

}  // namespace

}  // namespace flashattn::detail::cuda::sm70

namespace flashattn::detail {

const Backend& cuda_sm70_backend() {
  static const Backend b{
      .name = "cuda_sm70",
      .device = DeviceType::cuda,
      .supports_fwd = cuda::sm70::supports_fwd,
      .run_fwd = cuda::sm70::run_fwd,
      .supports_bwd = cuda::sm70::supports_bwd,
      .run_bwd = cuda::sm70::run_bwd,
      .supports_kvcache = cuda::sm70::supports_kvcache,
      .run_kvcache = cuda::sm70::run_kvcache,
      .paged_varlen_fwd = true,
  };
  return b;
}

}  // namespace flashattn::detail
