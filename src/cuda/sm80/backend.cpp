// The cuda_sm80 backend: tensor-core FlashAttention-2 (mma.sync, ldmatrix, cp.async) for compute
// capability 8.0 and newer, f16/bf16, head dims up to 256. supports_* names the first condition a call
// breaks; run_* make the call's device current and enqueue on the caller's stream.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "api/backends.h"
#include "cuda/common/alignment.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/device_props.h"
#include "cuda/common/launch.h"
#include "cuda/sm80/debug.h"
#include "cuda/sm80/kernel_traits.h"
#include "cuda/sm80/launch.h"

namespace flashattn::detail {

namespace {

using cuda::attn::head_dim_bucket;
using cuda::attn::head_dim_compiled;
using cuda::sm80::bwd_tile_for;
using cuda::sm80::dq_tile;
using cuda::sm80::fwd_tile;

using cuda::device_props;
using cuda::DeviceProps;
using cuda::sm80::bwd_tile_groups_disabled;
using cuda::sm80::paired_fwd_disabled;
using cuda::sm80::persistent_fwd_disabled;
using cuda::sm80::tile_groups_disabled;

std::string grid_reason(int64_t blocks, const char* what) {
  if (blocks <= cuda::kMaxGridX) return {};
  return std::string(what) + " needs " + std::to_string(blocks) + " CTAs, above the grid limit 2^31 - 1";
}

std::string smem_reason(const DeviceProps& d, int64_t bytes, const char* what, int device) {
  if (bytes <= d.smem_optin) return {};
  return std::string(what) + " needs " + std::to_string(bytes) +
         " bytes of shared memory per CTA, cuda:" + std::to_string(device) + " allows " + std::to_string(d.smem_optin);
}

// Conditions shared by forward and backward; `smem` is the largest shared-memory footprint of the
// direction's kernels for this head dim.
std::string common_reason(const FwdProblem& p, int64_t smem) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return std::string("dtype ") + dtype_name(p.dtype) + " (tensor cores need f16 or bf16; the SIMT backends take f32)";
  const DeviceProps& d = device_props(p.device.index);
  if (!d.error.empty()) return d.error;
  if (d.major < 8)
    return "needs compute capability >= 8.0, cuda:" + std::to_string(p.device.index) + " is " +
           std::to_string(d.major) + "." + std::to_string(d.minor);
  const int bucket = head_dim_bucket(p.head_dim);
  if (p.head_dim > cuda::attn::kMaxHeadDim || p.head_dim % 8 != 0)
    return "head_dim " + std::to_string(p.head_dim) + " (a multiple of 8 up to 256)";
  if (!head_dim_compiled(bucket))
    return "head_dim bucket " + std::to_string(bucket) + " not compiled (FLASHATTN_HEAD_DIMS)";
  // Sequence positions are int inside the kernels (tile indices, in-tile offsets).
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 256;
  if (p.seqlen_q > kMaxSeq || p.seqlen_k > kMaxSeq) return "sequence length above 2^31 - 257";
  if (std::string r = smem_reason(d, smem, "this head dim", p.device.index); !r.empty()) return r;
  for (const auto& [view, name] :
       {std::pair{p.q, "q"}, std::pair{p.k, "k"}, std::pair{p.v, "v"}, std::pair{p.out, "out"}})
    if (std::string r = cuda::unaligned16_reason(name, view, 2); !r.empty()) return r;
  return {};
}

// Whether the forward of `p` runs the general instance on its device (kernel_traits.h, fwd_general).
bool general_fwd(const FwdProblem& p) {
  return cuda::sm80::fwd_general(cuda::sm80::needs_general_fwd(p), head_dim_bucket(p.head_dim),
                                 device_props(p.device.index).smem_optin);
}

// Whether the forward of `p` runs the paired tile on its device (kernel_traits.h).
bool paired_fwd(const FwdProblem& p) {
  const DeviceProps& d = device_props(p.device.index);
  return !paired_fwd_disabled() &&
         cuda::sm80::use_paired_fwd(head_dim_bucket(p.head_dim), general_fwd(p), d.major, d.smem_per_sm);
}

std::string supports_fwd(const FwdProblem& p) {
  const cuda::sm80::FwdTile tile = fwd_tile(head_dim_bucket(p.head_dim), general_fwd(p), paired_fwd(p));
  if (std::string r = common_reason(p, tile.smem_bytes()); !r.empty()) return r;
  // The kernel's tile loop (fwd_kernel.cuh) adds the grid size to an int tile index, and the grid can be
  // as large as the tile list: at most 2^30 tiles keep that sum below 2^31. (Above it a varlen tile past
  // its sequence wrapped to a negative index and read cu_seqlens[-1].)
  constexpr int64_t kMaxFwdTiles = int64_t(1) << 30;
  const int64_t tiles = cuda::ceil_div(p.seqlen_q, tile.block_m) * p.heads * p.batch;
  if (tiles > kMaxFwdTiles)
    return "the forward needs " + std::to_string(tiles) + " query tiles, above 2^30 (32-bit tile indices)";
  // Paged keys are 32-bit positions up to max_blocks_per_seq * page_size (attn/paged_keys.h): a sequence's
  // length read on the device is clamped to it, not to max_seqlen_k; the page size is a 32-bit divisor
  // (even where the table has no column and addresses nothing).
  constexpr int64_t kMaxKeyPositions = std::numeric_limits<int32_t>::max() - 256;
  if (p.paged_kv() && std::max(p.paged.capacity, p.paged.page_size) > kMaxKeyPositions)
    return "paged K/V: max_blocks_per_seq * page_size = " + std::to_string(p.paged.capacity) + " (page_size " +
           std::to_string(p.paged.page_size) + ") key positions, above 2^31 - 257";
  return {};
}

std::string supports_bwd(const BwdProblem& p) {
  const int bucket = head_dim_bucket(p.head_dim);
  // A device whose attributes cannot be read gets common_reason's error; the partition does not matter then.
  const cuda::sm80::BwdTile tile = bwd_tile_for(bucket, device_props(p.device.index).smem_optin);
  const int64_t smem = std::max(tile.smem_bytes(), dq_tile(bucket).smem_bytes());
  if (std::string r = common_reason(p, smem); !r.empty()) return r;
  for (const auto& [view, name] :
       {std::pair{p.dout, "dout"}, std::pair{p.dq, "dq"}, std::pair{p.dk, "dk"}, std::pair{p.dv, "dv"}})
    if (std::string r = cuda::unaligned16_reason(name, view, 2); !r.empty()) return r;
  const int64_t rows = p.total_q * p.heads;
  for (const std::string& r :
       {grid_reason(cuda::ceil_div(p.seqlen_k, tile.block_n) * p.heads_k * p.batch, "the backward"),
        grid_reason(cuda::ceil_div(p.seqlen_q, dq_tile(bucket).block_m) * p.heads * p.batch, "the dQ kernel"),
        grid_reason(cuda::ceil_div(rows * (p.head_dim / 8), 256), "the dQ conversion"),
        grid_reason(cuda::ceil_div(rows, 8), "the D reduction")})  // a warp per row, 8 per CTA (bwd_prepost.cuh)
    if (!r.empty()) return r;
  return {};
}

void run_fwd(const FwdProblem& p, Stream stream) {
  cuda::DeviceGuard guard(p.device);
  const DeviceProps& d = device_props(p.device.index);
  const cuda::sm80::DeviceFacts device{tile_groups_disabled() ? 0 : d.l2_bytes, d.sms};
  cuda::sm80::launch_fwd(p, general_fwd(p), paired_fwd(p), !persistent_fwd_disabled(), device,
                         static_cast<cudaStream_t>(stream));
}

void run_bwd(const BwdProblem& p, Stream stream) {
  cuda::DeviceGuard guard(p.device);
  const DeviceProps& d = device_props(p.device.index);
  const cuda::sm80::DeviceFacts device{bwd_tile_groups_disabled() ? 0 : d.l2_bytes, d.sms};
  cuda::sm80::launch_bwd(p, d.smem_optin, device, static_cast<cudaStream_t>(stream));
}

}  // namespace

const Backend& cuda_sm80_backend() {
  static const Backend b = [] {
    Backend x;
    x.name = "cuda_sm80";
    x.device = DeviceType::cuda;
    x.supports_fwd = &supports_fwd;
    x.run_fwd = &run_fwd;
    x.paged_varlen_fwd = true;
    x.supports_bwd = &supports_bwd;
    x.run_bwd = &run_bwd;
    return x;
  }();
  return b;
}

}  // namespace flashattn::detail
