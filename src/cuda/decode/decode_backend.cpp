// cuda_decode: forward_kvcache on the GPU (docs/decode.md). The call runs as up to three kernels on
// the caller's stream, with no host synchronisation and no host read of device memory, so it can be
// captured into a CUDA graph:
//   1. append + rotary (when k_new is given or rotary is on): new k/v into the cache, rotated q into a
//      workspace;
//   2. the split-KV attention with GQA packing (tensor cores);
//   3. the combine of the splits, when there is more than one.
// On sm_90+ the attention (when the append precedes it) and the combine use programmatic dependent launch
// (cuda/common/pdl.cuh). Scratch memory comes from the caller's workspace allocator when the call has one
// (KVCacheParams::workspace_allocator), else from cudaMallocAsync.
// Grids depend only on shapes and the cache capacity; sequence lengths are read on the device.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>

#include "api/backends.h"
#include "common/env_switch.h"
#include "cuda/common/alignment.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/device_props.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/decode/cache_rows.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_tile.h"
#include "cuda/decode/split_heuristic.h"

namespace flashattn::detail::cuda::decode {

namespace {

template <bool kFp8Cache>
KernelShape prepare_bucket(DType dtype, int bucket, RowShape shape, bool paged, int device) {
  switch (bucket) {
    case 64:
      return prepare_attention_for<64, kFp8Cache>(dtype, shape, paged, device);
    case 128:
      return prepare_attention_for<128, kFp8Cache>(dtype, shape, paged, device);
    case 256:
      return prepare_attention_for<256, kFp8Cache>(dtype, shape, paged, device);
    default:
      throw Error(Status::internal, "flashattn: cuda_decode: no head-dim bucket " + std::to_string(bucket));
  }
}

template <bool kFp8Cache>
void launch_bucket(DType dtype, int bucket, RowShape shape, const KVCacheProblem& p, const DecodeArgs& a,
                   int64_t blocks, size_t smem, bool after_kernel, cudaStream_t stream) {
  switch (bucket) {
    case 64:
      return launch_attention_for<64, kFp8Cache>(dtype, shape, p, a, blocks, smem, after_kernel, stream);
    case 128:
      return launch_attention_for<128, kFp8Cache>(dtype, shape, p, a, blocks, smem, after_kernel, stream);
    case 256:
      return launch_attention_for<256, kFp8Cache>(dtype, shape, p, a, blocks, smem, after_kernel, stream);
    default:
      throw Error(Status::internal, "flashattn: cuda_decode: no head-dim bucket " + std::to_string(bucket));
  }
}

}  // namespace

KernelShape prepare_attention(DType dtype, int bucket, RowShape shape, bool fp8_cache, bool paged, int device) {
  return fp8_cache ? prepare_bucket<true>(dtype, bucket, shape, paged, device)
                   : prepare_bucket<false>(dtype, bucket, shape, paged, device);
}

void launch_attention(DType dtype, int bucket, RowShape shape, const KVCacheProblem& p, const DecodeArgs& a,
                      int64_t blocks, size_t smem, bool after_kernel, cudaStream_t stream) {
  if (p.cache_dtype == DType::fp8_e4m3)
    launch_bucket<true>(dtype, bucket, shape, p, a, blocks, smem, after_kernel, stream);
  else
    launch_bucket<false>(dtype, bucket, shape, p, a, blocks, smem, after_kernel, stream);
}

namespace {

// Largest cache position (and key index) the kernels handle in 32-bit arithmetic, with a tile of slack.
constexpr int64_t kMaxPositions = (int64_t(1) << 31) - 129;

// What the split heuristic and the pipeline depth need to know about a device.
struct DeviceFacts {
  int sm_count = 0;
  size_t smem_per_block_optin = 0;
  size_t smem_per_sm = 0;
  bool wgmma = false;  // the warpgroup shape runs here (decode_tile.h)
};

// FLASHATTN_DECODE_WGMMA=0 keeps every call on the mma.sync shapes (read once per process): a
// benchmarking switch for interleaved A/Bs.
bool wgmma_disabled() {
  static const bool off = env_switch_off("FLASHATTN_DECODE_WGMMA");
  return off;
}

DeviceFacts device_facts(int device) {
  const DeviceProps& d = device_props(device);
  if (d.status != cudaSuccess) throw_cuda_error(d.status, "cudaDeviceGetAttribute", __FILE__, __LINE__);
  DeviceFacts f;
  f.sm_count = d.sms;
  f.smem_per_block_optin = size_t(d.smem_optin);
  f.smem_per_sm = size_t(d.smem_per_sm);
  // The warpgroup kernels hold wgmma code only in the sm_90a image, which runs on compute capability
  // 9.0 exactly; FLASHATTN_SM90A says the build has that image (cmake/FlashattnCuda.cmake).
#if defined(FLASHATTN_SM90A)
  f.wgmma = d.major == 9 && d.minor == 0 && !wgmma_disabled();
#endif
  return f;
}

int64_t packed_rows(const KVCacheProblem& p) { return p.seqlen_q * p.group_size(); }

// Whether the cache is read at full speed by one block per SM: contiguous, or paged on the compact path
// with pages of at least kStreamingMinPageSize rows (split_heuristic.h).
bool streaming_cache(const KVCacheProblem& p) {
  const CacheView& c = p.cache;
  return !c.paged() || (uses_compact_paging(c, cache_elem_bytes(p)) && c.page_size >= kStreamingMinPageSize);
}

// The row shape of the call's kernel (decode_tile.h, decode_shape): the small shape streams with at most
// one row for each of its 4 warps.
RowShape call_shape(const KVCacheProblem& p, const DeviceFacts& facts) {
  const int64_t rows = packed_rows(p);
  const bool small_streams = rows <= key_warps(RowShape::small) && streaming_cache(p);
  return decode_shape(rows, decode_head_dim(p.head_dim), facts.smem_per_block_optin, small_streams, facts.wgmma,
                      p.cache_dtype == DType::fp8_e4m3);
}

std::string supports(const KVCacheProblem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return std::string("dtype ") + dtype_name(p.dtype) + " (the tensor-core decode kernels take f16 and bf16)";
  const bool fp8 = p.cache_dtype == DType::fp8_e4m3;
  if (p.cache_dtype != p.dtype && !fp8)
    return std::string("a ") + dtype_name(p.cache_dtype) + " KV cache beside " + dtype_name(p.dtype) + " queries";
  if (p.head_dim % 8 != 0 || p.head_dim > 256)
    return "head_dim " + std::to_string(p.head_dim) + " (multiples of 8 up to 256)";
  if (std::string why = cuda::compiled_kernels_reason(p.device.index); !why.empty()) return why;
  // An FP8 row is copied in 16-byte chunks of 16 elements (tile_loader.cuh).
  if (fp8 && p.head_dim % 16 != 0)
    return "head_dim " + std::to_string(p.head_dim) + " with an fp8_e4m3 cache (multiples of 16)";
  const CacheView& c = p.cache;
  if (std::string r = kvcache_alignment_reason(p, cache_elem_bytes(p)); !r.empty()) return r;
  if (c.capacity > kMaxPositions || c.page_size > kMaxPositions)
    return "cache capacity " + std::to_string(c.capacity) + " positions, page_size " + std::to_string(c.page_size) +
           " (each at most " + std::to_string(kMaxPositions) + ")";
  if (packed_rows(p) > kMaxPositions)
    return "seqlen_q * heads / heads_k = " + std::to_string(packed_rows(p)) + " (at most " +
           std::to_string(kMaxPositions) + ")";
  const int64_t append_rows = p.batch * (p.seqlen_new * p.heads_k + p.seqlen_q * p.heads);
  if (append_rows > kMaxPositions)
    return "batch * (seqlen_new * heads_k + seqlen_q * heads) = " + std::to_string(append_rows) +
           " rows to append or rotate (at most " + std::to_string(kMaxPositions) + ")";
  const DeviceFacts facts = device_facts(int(p.device.index));
  const size_t limit = facts.smem_per_block_optin;
  const RowShape shape = call_shape(p, facts);
  const size_t smem = decode_smem_bytes(decode_head_dim(p.head_dim), shape, fp8);
  if (smem > limit)
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the device allows " +
           std::to_string(limit);
  const int64_t row_tiles = ceil_div(packed_rows(p), 16 * row_warps(shape));
  if (p.batch * p.heads_k * row_tiles > kMaxGridX / kMaxSplits)
    return "batch * heads_k * query row tiles = " + std::to_string(p.batch * p.heads_k * row_tiles) +
           " blocks times up to " + std::to_string(kMaxSplits) + " splits exceeds the grid limit";
  return {};
}

// Upper bound of the keys one block attends, from what the host knows.
int64_t max_keys(const KVCacheProblem& p) {
  int64_t keys = p.cache_seqlens ? p.cache.capacity : p.cache_seqlens_scalar + p.seqlen_new;
  const ScoreParams& s = p.score;
  if (s.window_left >= 0 && s.window_right >= 0) keys = std::min(keys, s.window_left + s.window_right + p.seqlen_q);
  return keys;
}

void run(const KVCacheProblem& p, Stream stream) {
  if (p.batch == 0) return;
  DeviceGuard guard(p.device);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int device = p.device.index;
  const bool rotary = p.rotary.cos != nullptr;
  const int64_t rows = packed_rows(p);
  const int bucket = decode_head_dim(p.head_dim);
  const DeviceFacts facts = device_facts(device);
  const RowShape shape = call_shape(p, facts);
  const KernelShape ks =
      prepare_attention(p.dtype, bucket, shape, p.cache_dtype == DType::fp8_e4m3, p.cache.paged(), device);

  DecodeArgs a;
  a.group = int(p.group_size());
  a.rows = int(rows);
  a.row_tiles = int(ceil_div(rows, ks.rows));
  a.scale_log2 = float(double(p.score.softmax_scale) * std::numbers::log2e);
  a.score_mod = p.score.softcap > 0.0f || p.score.alibi_slopes != nullptr;
  a.page = make_fast_divmod(p.cache.paged() ? uint32_t(p.cache.page_size) : 1u);
  SplitInputs si;
  si.blocks = p.batch * p.heads_k * a.row_tiles;
  si.max_keys = max_keys(p);
  si.block_n = ks.block_n;
  si.rows = std::min<int64_t>(rows, ks.rows);
  si.sm_count = facts.sm_count;
  si.blocks_per_sm = ks.blocks_per_sm;
  // The wide shape runs one block per SM whatever the cache (its shared memory allows no second). An FP8
  // cache's block does not stream alone: it converts each tile behind a second barrier, and with one block
  // per SM its kernel read at 46% of the DRAM rate, in the 16-bit kernel's time (H100, batch 64 x 8k,
  // Nsight Compute); it runs as many blocks per SM as fit instead.
  const bool fp8_cache = p.cache_dtype == DType::fp8_e4m3;
  si.streaming = si.rows <= ks.threads / 32 && (shape == RowShape::wide || (streaming_cache(p) && !fp8_cache));
  si.requested = p.num_splits;
  a.num_splits = choose_num_splits(si);

  // Workspace: [rotated q][split LSEs][split outputs], each part 256-byte aligned; from the caller's
  // allocator when there is one.
  const size_t q_rot_bytes =
      rotary ? Workspace::part_bytes(size_t(p.batch * p.seqlen_q * p.heads * p.head_dim) * 2) : 0;
  const size_t part_rows = a.num_splits > 1 ? size_t(a.num_splits) * size_t(p.batch * p.heads_k * rows) : 0;
  const size_t lse_bytes = Workspace::part_bytes(part_rows * sizeof(float));
  const size_t out_bytes = part_rows * size_t(p.head_dim) * sizeof(float);
  Workspace ws(q_rot_bytes + lse_bytes + out_bytes, st, p.workspace_allocator, p.workspace_context);
  unsigned char* base = ws.as<unsigned char>();
  if (reinterpret_cast<uintptr_t>(base) % 256 != 0)  // the 16-byte loads of q_rot and the partials rely on it
    throw Error(Status::internal, "flashattn: cuda_decode: workspace not 256-byte aligned");
  void* q_rot = rotary ? base : nullptr;
  if (part_rows > 0) {
    a.part_lse = reinterpret_cast<float*>(base + q_rot_bytes);
    a.part_out = reinterpret_cast<float*>(base + q_rot_bytes + lse_bytes);
  }

  // The attention and the combine may launch while the kernel before them runs (programmatic dependent
  // launch, cuda/common/pdl.cuh): a decode step that appends its token, captured in a CUDA graph,
  // measured 14% faster at batch 1 x 4k on the H200 (bench/NOTES.md).
  const bool appended = launch_append_rotary(p, q_rot, st);  // nothing to launch without new tokens and rotary
  if (rows == 0) return;
  KVCacheProblem pa = p;
  if (rotary) pa.q = RowsView{q_rot, p.seqlen_q * p.heads * p.head_dim, p.heads * p.head_dim, p.head_dim};
  a.wait_for_inputs = appended;
  // A streaming call is sized for one block per SM (split_heuristic.h). Its launch reserves more than
  // half of an SM's shared memory so that the block scheduler cannot put two of its blocks on one SM
  // while others idle; without the reservation it did so when the grid launched early behind the append
  // kernel (programmatic dependent launch): batch 16 x 4k lost 4.4% (bench/NOTES.md).
  const size_t launch_smem =
      si.streaming ? std::max(ks.smem, std::min(facts.smem_per_sm / 2, facts.smem_per_block_optin)) : ks.smem;
  launch_attention(p.dtype, bucket, shape, pa, a, si.blocks * a.num_splits, launch_smem, appended, st);
  if (a.num_splits > 1) launch_combine(pa, a, st);
}

}  // namespace

}  // namespace flashattn::detail::cuda::decode

namespace flashattn::detail {

const Backend& cuda_decode_backend() {
  static const Backend b{.name = "cuda_decode",
                         .device = DeviceType::cuda,
                         .supports_kvcache = cuda::decode::supports,
                         .run_kvcache = cuda::decode::run};
  return b;
}

}  // namespace flashattn::detail
