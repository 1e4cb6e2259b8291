// The cuda_sm70 backend: FlashAttention-2 forward on Volta's tensor cores (mma.sync.m8n8k4, fwd_kernel.cuh)
// for compute capability 7.0 and newer, f16 only (Volta has no bf16 tensor-core instruction), head dims up
// to 256 (the dispatcher pads those that are not multiples of 8). The kernel uses only sm_70 instructions,
// so this file, built for the architectures of FLASHATTN_CUDA_ARCHS (80 and 90a by default: CUDA 13
// compiles nothing older than sm_75), runs the same code on any later GPU when the call names the backend;
// a Volta GPU runs the build's sm_70 image of the same kernel (image.h).
//
// Opt-in (Backend::default_decline) until the kernel has been run on a GPU; no backward and no KV-cache
// path yet (docs/kernels.md, "cuda_sm70").

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "api/backends.h"
#include "cuda/attn/head_dim.h"
#include "cuda/attn/score_args.h"
#include "cuda/attn/switch.h"
#include "cuda/common/alignment.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/device_props.h"
#include "cuda/common/launch.h"
#include "cuda/sm70/fwd_kernel.cuh"
#include "cuda/sm70/fwd_tile.h"
#include "cuda/sm70/image.h"

namespace flashattn::detail::cuda::sm70 {

namespace {

int64_t fwd_blocks(const FwdProblem& p) { return ceil_div(p.seqlen_q, FwdTile::kBlockM) * p.heads * p.batch; }

std::string supports_fwd(const FwdProblem& p) {
  if (p.dtype == DType::bf16)
    return "dtype bf16: Volta's tensor cores take f16 only (mma.m8n8k4 has no bf16 form); cuda_sm80 and the "
           "SIMT backends run bf16";
  if (p.dtype != DType::f16) return std::string("dtype ") + dtype_name(p.dtype) + " (f16 only)";
  const DeviceProps& d = device_props(p.device.index);
  if (!d.error.empty()) return d.error;
  if (d.major < 7)
    return "needs compute capability >= 7.0, cuda:" + std::to_string(p.device.index) + " is " +
           std::to_string(d.major) + "." + std::to_string(d.minor);
  if (p.head_dim > attn::kMaxHeadDim || p.head_dim % 8 != 0)
    return "head_dim " + std::to_string(p.head_dim) + " (a multiple of 8 up to 256)";
  const int bucket = attn::head_dim_bucket(p.head_dim);
  if (!attn::head_dim_compiled(bucket))
    return "head_dim bucket " + std::to_string(bucket) + " not compiled (FLASHATTN_HEAD_DIMS)";
  // Sequence positions are int inside the kernel (tile indices, in-tile offsets).
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 256;
  if (p.seqlen_q > kMaxSeq || p.seqlen_k > kMaxSeq) return "sequence length above 2^31 - 257";
  const int64_t smem = fwd_tile(bucket).smem_bytes();
  if (smem > d.smem_optin)
    return "needs " + std::to_string(smem) + " bytes of shared memory per CTA, cuda:" + std::to_string(p.device.index) +
           " allows " + std::to_string(d.smem_optin);
  if (fwd_blocks(p) > kMaxGridX)
    return "the query tiles need " + std::to_string(fwd_blocks(p)) + " CTAs, above the grid limit 2^31 - 1";
  for (const auto& [view, name] :
       {std::pair{p.q, "q"}, std::pair{p.k, "k"}, std::pair{p.v, "v"}, std::pair{p.out, "out"}})
    if (std::string r = unaligned16_reason(name, view, 2); !r.empty()) return r;
  return {};
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
    const size_t smem = size_t(fwd_tile(kHeadDim).smem_bytes());
    const dim3 grid = grid_1d(blocks, "cuda_sm70 forward");
    if (runs_image(p.device.index)) {
      // The kernel of the embedded sm_70 image (image.h), launched through its handle.
      const cudaKernel_t kernel = image_fwd_kernel(kHeadDim, p.device.index, smem);
      void* params[] = {&args};
      FA_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, dim3(FwdTile::kThreads), params, smem,
                                     static_cast<cudaStream_t>(stream)));
    } else {
      auto kernel = fwd_kernel<kHeadDim>;
      allow_dynamic_smem(kernel, smem, p.device.index, "cuda_sm70 forward");
      kernel<<<grid, FwdTile::kThreads, smem, static_cast<cudaStream_t>(stream)>>>(args);
      FA_CUDA_CHECK_LAUNCH("cuda_sm70 forward");
    }
  });
}

std::string not_yet_verified() {
  return "opt-in: the m8n8k4 kernels have not yet run on a GPU (name backend='cuda_sm70' to run them)";
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
      .default_decline = cuda::sm70::not_yet_verified,
  };
  return b;
}

}  // namespace flashattn::detail
