// The cuda_sm90 backend: the Hopper forward and backward (TMA, mbarrier pipeline, wgmma; fwd_kernel.cuh,
// bwd_kernel.cuh). Compiled into every CUDA build; its kernels exist only where FLASHATTN_CUDA_ARCHS holds
// 90a (FLASHATTN_SM90A). supports_fwd / supports_bwd name the first condition a call breaks, and defer_bwd
// the backward calls cuda_sm80 runs faster; all fall back to cuda_sm80 (options.backend = "cuda_sm90" runs the
// deferred ones regardless).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "api/backends.h"
#include "cuda/attn/score_args.h"
#include "cuda/common/alignment.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/device_props.h"
#include "cuda/common/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/sm80/launch.h"
#include "cuda/sm90/bwd_tile.h"
#include "cuda/sm90/fp8_fwd_layout.h"
#include "cuda/sm90/fwd_tile.h"
#include "cuda/sm90/launch.h"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::detail {

namespace {

using cuda::sm90::bwd_bucket;
using cuda::sm90::bwd_tile;
using cuda::sm90::fwd_bucket;
using cuda::sm90::fwd_tile;

// Whether the environment variable `name` is set to `value` (callers read it once per process, into a
// static), for A/B runs and opt-ins.
bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string_view(v) == value;
}

// A kernel variant that is on unless the environment variable `name` is "0".
bool env_switch_on(const char* name) { return !env_is(name, "0"); }

// The consumer warpgroups' ping-pong (fwd_kernel.cuh) is on: it measured faster at every point of the
// sweep on the H200 (bench/NOTES.md, session 15). FLASHATTN_SM90_PINGPONG=0 turns it off.
bool pingpong_enabled() {
  static const bool on = env_switch_on("FLASHATTN_SM90_PINGPONG");
  return on;
}

// The intra-warpgroup overlap of the next key tile's Q K^T with this tile's P V (fwd_kernel.cuh) is on:
// the kernel has it in the 64 bucket only (1.04-1.10x there at 2k-16k tokens on the H100; 0.90-0.98x at
// 128 and 0.85-0.95x at 256 beside the ping-pong, bench/NOTES.md, session 16). FLASHATTN_SM90_OVERLAP=0
// turns it off.
bool overlap_enabled() {
  static const bool on = env_switch_on("FLASHATTN_SM90_OVERLAP");
  return on;
}

// Paged K/V: whether the producer copies rows with cp.async (fwd_kernel.cuh, produce_paged_rows) instead of
// loading page-sized TMA boxes: only where no box exists (a page size without a divisor of the tile that
// is a multiple of 8). Where boxes exist they measured faster: page 16, D = 128, H100, 1.12-1.20x the
// contiguous call's time against 1.30-1.34x with rows (bench/NOTES.md, session 26).
// FLASHATTN_SM90_PAGED_ROWS=1 copies rows at every page size (the A/B arm).
bool paged_rows_copy(int box_rows) {
  static const bool always = env_is("FLASHATTN_SM90_PAGED_ROWS", "1");
  return box_rows == 0 || always;
}

// The epilogue's TMA store of O (fwd_kernel.cuh): one thread issues a box per panel and the warpgroup moves on,
// where the 16-byte stores keep every thread on the epilogue until they are issued. Written for issue 28's
// 2k-token points, where a work tile's epilogue and start are a larger share; not yet measured, so off unless
// FLASHATTN_SM90_TMA_STORE=1. Dense calls only: a varlen call's box would run into the next sequence's rows.
bool tma_store_enabled(const FwdProblem& p) {
  static const bool on = env_is("FLASHATTN_SM90_TMA_STORE", "1");
  return on && !p.varlen();
}

// The backward's dQ through shared memory and the writer warp's bulk reductions (bwd_kernel.cuh, BwdDq::bulk)
// instead of each consumer thread's fp32 reductions: 1.24-1.41x the reductions' backward on an H100 (D = 64
// and 128, 2k-8k, causal and not; bench/NOTES.md, session 23). FLASHATTN_SM90_BWD_DQ_BULK=0 runs the
// reductions (BwdDq::reductions), kept as the A/B arm.
bool bwd_dq_bulk_enabled() {
  static const bool on = env_switch_on("FLASHATTN_SM90_BWD_DQ_BULK");
  return on;
}

// How far a row's running max may grow before the forward's online softmax moves it and rescales O
// (FwdArgs::max_slack): 8 base-2 units, as FlashAttention-4 does, keeps P below 2^8 (exact in every
// dtype's range, the same relative rounding) and leaves O's rescale to the few tiles whose max jumps.
// FLASHATTN_SM90_MAX_SLACK=<units> sets another value (0: move on any growth), for A/B runs.
float max_slack() {
  static const float slack = [] {
    const char* v = std::getenv("FLASHATTN_SM90_MAX_SLACK");
    if (v == nullptr || *v == '\0') return 8.0f;
    char* end = nullptr;
    const float parsed = std::strtof(v, &end);
    return end != v && parsed >= 0.0f && parsed <= 16.0f ? parsed : 8.0f;
  }();
  return slack;
}

// The persistent grid (one CTA per SM looping over work tiles, fwd_kernel.cuh): the next tile's Q and
// first K tile load while this one's last products and epilogue run, which pays where a tile has few key
// tiles to hide its start behind. Dealt out statically (CTA c takes c, c + grid, ...) it balances only tiles
// of equal cost: under a causal mask static dealing measured 0.74-0.95x one CTA per tile
// (bench/results/2026-12-06-sm90-persistent.md). Drawn dynamically from a counter (DynamicTiles), an SM that
// finishes takes the next tile of the list, heaviest first (tile_order.h), as the hardware's scheduling of
// one CTA per tile does, and keeps the persistent grid's overlap of one tile's start with the last one's end.
// Hence: static for dense calls without a mask or window and with fewer than 4096 keys, dynamic for masked
// dense calls, one CTA per tile for the rest (varlen, long unmasked calls).
// FLASHATTN_SM90_PERSISTENT=0 / =1: one CTA per tile / the persistent grid everywhere;
// FLASHATTN_SM90_DYNAMIC=0 / =1: never / always the dynamic order where the grid is persistent (=0 also
// gives masked calls one CTA per tile, the policy before the dynamic order). For A/B runs.
enum class FwdGrid { per_tile, static_tiles, dynamic_tiles };
FwdGrid fwd_grid(const FwdProblem& p) {
  static const bool persistent_off = env_is("FLASHATTN_SM90_PERSISTENT", "0");
  static const bool persistent_on = env_is("FLASHATTN_SM90_PERSISTENT", "1");
  static const bool dynamic_off = env_is("FLASHATTN_SM90_DYNAMIC", "0");
  static const bool dynamic_on = env_is("FLASHATTN_SM90_DYNAMIC", "1");
  if (persistent_off) return FwdGrid::per_tile;
  const bool masked = p.score.window_left >= 0 || p.score.window_right >= 0;
  constexpr int64_t kMaxKeys = 4096;
  const bool static_fits = !p.varlen() && !masked && p.seqlen_k < kMaxKeys;
  const bool dynamic_fits = !p.varlen() && masked && !dynamic_off;
  if (!persistent_on && !static_fits && !dynamic_fits) return FwdGrid::per_tile;
  if (dynamic_on) return FwdGrid::dynamic_tiles;
  if (dynamic_off) return FwdGrid::static_tiles;
  return static_fits ? FwdGrid::static_tiles : FwdGrid::dynamic_tiles;
}

// The work tiles' order (attn/tile_order.h): a masked dense call's tiles differ in cost, and CTAs take them
// in list order (the hardware's blockIdx order, or the dynamic draw), so from 16 query tiles per head on
// its heavy tiles go first in groups of heads whose K and V share the L2, and its light tiles last. Measured
// on the dynamic grid (H100, causal, per-head time / grouped time): 1.01-1.05x at 8k tokens, 0.99-1.02x at
// 2k, but 0.94-0.99x at 1k (8 query tiles a head), hence the threshold (bench/NOTES.md, session 21). One
// CTA per SM (the forward's shared memory), hence one slot per SM. Varlen and unmasked calls keep the
// per-head order; FLASHATTN_SM90_TILE_GROUPS=0 keeps it everywhere (A/B runs).
cuda::attn::TileOrder fwd_tile_order(const FwdProblem& p, int block_m) {
  static const bool groups = env_switch_on("FLASHATTN_SM90_TILE_GROUPS");
  constexpr int64_t kMinMBlocks = 16;
  const bool masked = p.score.window_left >= 0 || p.score.window_right >= 0;
  const int64_t m_blocks = cuda::ceil_div(p.seqlen_q, block_m), head_seqs = p.batch * p.heads;
  const cuda::DeviceProps& device = cuda::device_props(p.device.index);
  if (!groups || !masked || p.varlen() || device.l2_bytes <= 0 || m_blocks < kMinMBlocks || head_seqs <= 0) return {};
  const int64_t kv_bytes = p.seqlen_k * p.head_dim * 2 * dtype_size(p.dtype);
  return cuda::attn::masked_tile_order(int(m_blocks), int(head_seqs), kv_bytes, p.group_size(), device.l2_bytes,
                                       device.sms);
}

// The native FP8 forward measured slower than cuda_fp8's bf16 copies (0.73-0.81x our bf16 forward on an
// H100, bench/NOTES.md session 23): the default path leaves FP8 calls to cuda_fp8 unless
// FLASHATTN_SM90_FP8=1; a call naming cuda_sm90 runs it (the FP8 tests force every backend).
std::string defer_fwd(const FwdProblem& p) {
  static const bool fp8_on = env_is("FLASHATTN_SM90_FP8", "1");
  if (p.dtype == DType::fp8_e4m3 && !fp8_on)
    return "the native FP8 forward is opt-in until it measures faster than cuda_fp8 (FLASHATTN_SM90_FP8=1)";
  return {};
}

// Backward calls where cuda_sm80's backward measured as fast or faster go to it (options.backend =
// "cuda_sm90" runs them regardless): head dims up to 64, where the key split of dQ doubles its reductions
// (H100, S 1k-16k: sm90's bulk-reduced dQ at 0.94-1.07x sm80's speed;
// bench/results/2026-12-07-h100-session23.md). The deterministic mode runs here: its ordered reductions
// measured 1.5-2.7x faster than the main kernel without dQ followed by sm80's dQ kernel, which is a lower
// bound on sm80's own deterministic backward (bench/results/2026-12-07-h100-session24.md).
std::string defer_bwd(const BwdProblem& p) {
  if (bwd_bucket(p.head_dim) == 64)
    return "head_dim <= 64: cuda_sm90's backward measured 0.94-1.07x cuda_sm80's speed (H100)";
  return {};
}

constexpr bool bucket_compiled(int bucket) {
  bool compiled = false;
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_64)
  compiled = compiled || bucket == 64;
#endif
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_128)
  compiled = compiled || bucket == 128;
#endif
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_192)
  compiled = compiled || bucket == 192;
#endif
#if defined(FLASHATTN_SM90A) && defined(FLASHATTN_HDIM_256)
  compiled = compiled || bucket == 256;
#endif
  (void)bucket;
  return compiled;
}

// Launches the (dtype, bucket, instance) kernel; only compiled buckets are referenced.
template <int kBucket>
void run_bucket(const cuda::sm90::FwdArgs& args, DType dtype, bool general, cudaStream_t stream) {
  if constexpr (bucket_compiled(kBucket)) {
    if (dtype == DType::bf16)
      general ? cuda::sm90::run_fwd<__nv_bfloat16, kBucket, true>(args, stream)
              : cuda::sm90::run_fwd<__nv_bfloat16, kBucket, false>(args, stream);
    else
      general ? cuda::sm90::run_fwd<__half, kBucket, true>(args, stream)
              : cuda::sm90::run_fwd<__half, kBucket, false>(args, stream);
  }
}

// Rows and sequences of the TMA maps: a varlen call's q and k are packed (total rows, heads) tensors, one
// "sequence" of all their rows, and the kernel adds each sequence's first row (cu_seqlens) itself. Paged
// K/V are (page rows, heads, blocks): the kernel takes each box's block from the block table.
int64_t map_rows_q(const FwdProblem& p) { return p.varlen() ? p.total_q : p.seqlen_q; }
int64_t map_batch(const FwdProblem& p) { return p.varlen() ? 1 : p.batch; }
int64_t map_rows_k(const FwdProblem& p) {
  return p.paged_kv() ? p.paged.page_size : p.varlen() ? p.total_k : p.seqlen_k;
}
int64_t map_batch_k(const FwdProblem& p) { return p.paged_kv() ? p.paged.num_blocks : map_batch(p); }

std::string device_reason(int device) {
  int major = 0, minor = 0;
  cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so the caller's next CUDA call does not see it
    return std::string("cannot query cuda:") + std::to_string(device) + ": " + cudaGetErrorString(err);
  }
  if (major != 9 || minor != 0)
    return "needs compute capability 9.0 (sm_90a code), cuda:" + std::to_string(device) + " is " +
           std::to_string(major) + "." + std::to_string(minor);
  return {};
}

// The device's conditions, checked last (they query the driver): compute capability 9.0 and `smem` bytes
// of shared memory per CTA within its opt-in limit.
[[maybe_unused]] std::string device_and_smem_reason(int device, int smem) {
  if (std::string r = device_reason(device); !r.empty()) return r;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return "cannot query the shared-memory limit of cuda:" + std::to_string(device);
  }
  if (smem > optin)
    return "needs " + std::to_string(smem) + " bytes of shared memory per CTA, the device allows " +
           std::to_string(optin);
  return {};
}

// What the forward and the backward check alike: f16/bf16, a head dim of a compiled bucket (`bucket`, 0 for
// none; `head_dims` says which), no dropout.
[[maybe_unused]] std::string kernel_reason(const FwdProblem& p, int bucket, const char* head_dims) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return std::string("dtype ") + dtype_name(p.dtype) + " (f16 or bf16 only)";
  if (bucket == 0 || p.head_dim % 8 != 0) return "head_dim " + std::to_string(p.head_dim) + " (" + head_dims + ")";
  if (!bucket_compiled(bucket))
    return "head_dim bucket " + std::to_string(bucket) + " not compiled (FLASHATTN_HEAD_DIMS)";
  if (p.dropout.p > 0.0f) return "dropout not yet implemented";
  return {};
}

// What the 16-bit and the FP8 forward both need of a call's sizes and views: TMA coordinates in int32 (rows,
// packed rows for varlen, heads and batch index the maps directly), a grid of `block_m`-row work tiles within
// CUDA's limit, q, k, v describable by maps of `elem_bytes` elements, and out 16-byte aligned (the 16-bit
// epilogue's chunks; the FP8 one's bf16 pairs need less).
[[maybe_unused]] std::string views_reason(const FwdProblem& p, int64_t elem_bytes, int block_m) {
  constexpr int64_t kMaxCoord = int64_t(1) << 30;
  if (map_rows_q(p) > kMaxCoord || map_rows_k(p) > kMaxCoord || p.seqlen_q > kMaxCoord || p.seqlen_k > kMaxCoord ||
      p.heads > kMaxCoord || p.batch > kMaxCoord || map_batch_k(p) > kMaxCoord || p.paged.capacity > kMaxCoord ||
      p.paged.page_size > kMaxCoord)
    return "a dimension above 2^30 (32-bit TMA coordinates)";
  const int64_t tiles = cuda::ceil_div(p.seqlen_q, block_m) * p.heads * p.batch;
  if (tiles > cuda::kMaxGridX) return "the forward has " + std::to_string(tiles) + " work tiles, above 2^31 - 1";
  for (const auto& [view, rows, heads, batch, name] : {std::tuple{p.q, map_rows_q(p), p.heads, map_batch(p), "q"},
                                                       std::tuple{p.k, map_rows_k(p), p.heads_k, map_batch_k(p), "k"},
                                                       std::tuple{p.v, map_rows_k(p), p.heads_k, map_batch_k(p), "v"}})
    if (std::string r = cuda::sm90::tma_view_reason(view, elem_bytes, rows, heads, batch, name); !r.empty()) return r;
  if (reinterpret_cast<uintptr_t>(p.out.ptr) % 16 != 0 || p.out.row_stride % 8 != 0 || p.out.head_stride % 8 != 0 ||
      p.out.batch_stride % 8 != 0)
    return "out: data pointer or strides not 16-byte aligned";
  return {};
}

// The native FP8 forward (fp8_fwd_kernel.cuh): e4m3 q, k, v at head dim 128, dense calls, no score
// modifiers; cuda_fp8 (bf16 copies) runs the other FP8 calls.
[[maybe_unused]] std::string fp8_reason(const FwdProblem& p) {
  if (p.head_dim != 128)
    return "fp8_e4m3 with head_dim " + std::to_string(p.head_dim) + " (the native FP8 kernel: 128)";
  if (!bucket_compiled(128)) return "head_dim bucket 128 not compiled (FLASHATTN_HEAD_DIMS)";
  if (p.varlen() || p.paged_kv()) return "fp8_e4m3 varlen or paged K/V (the native FP8 kernel: dense calls)";
  if (p.score.softcap != 0.0f || p.score.alibi_slopes != nullptr) return "fp8_e4m3 with softcap or ALiBi";
  if (std::string r = views_reason(p, 1, cuda::sm90::kFp8TileRows); !r.empty()) return r;
  return device_and_smem_reason(p.device.index, cuda::sm90::fp8_fwd_tile(128).smem_bytes());
}

std::string supports_fwd(const FwdProblem& p) {
#if !defined(FLASHATTN_SM90A)
  (void)p;
  return "this build has no sm_90a code (FLASHATTN_CUDA_ARCHS without 90a)";
#else
  if (p.dtype == DType::fp8_e4m3) return fp8_reason(p);
  const int bucket = fwd_bucket(p.head_dim);
  if (std::string why = kernel_reason(p, bucket, "a multiple of 8 in (32, 256]"); !why.empty()) return why;
  if (std::string r = views_reason(p, 2, fwd_tile(bucket).block_m); !r.empty()) return r;
  return device_and_smem_reason(p.device.index, fwd_tile(bucket).smem_bytes());
#endif
}

#if defined(FLASHATTN_SM90A)
// The arguments both forwards start from: the problem, the base-2 logit scale, the group, the query tiles.
cuda::sm90::FwdArgs fwd_args(const FwdProblem& p, int block_m) {
  cuda::sm90::FwdArgs args;
  args.p = p;
  args.scale_log2 = float(double(p.score.softmax_scale) * 1.4426950408889634);
  args.group = int(p.group_size());
  args.num_m_blocks = int(cuda::ceil_div(p.seqlen_q, block_m));
  return args;
}

// The maps of q (boxes of block_m rows), k and v (boxes of key_box_rows rows).
void set_qkv_maps(cuda::sm90::FwdArgs& args, const FwdProblem& p, int block_m, int key_box_rows) {
  args.q_map = cuda::sm90::make_rows_map(p.q, p.dtype, p.head_dim, map_rows_q(p), p.heads, map_batch(p), block_m);
  args.k_map =
      cuda::sm90::make_rows_map(p.k, p.dtype, p.head_dim, map_rows_k(p), p.heads_k, map_batch_k(p), key_box_rows);
  args.v_map =
      cuda::sm90::make_rows_map(p.v, p.dtype, p.head_dim, map_rows_k(p), p.heads_k, map_batch_k(p), key_box_rows);
}

void run_fwd_fp8(const FwdProblem& p, cudaStream_t stream) {
  const cuda::sm90::Sm90Fp8FwdTile tile = cuda::sm90::fp8_fwd_tile(128);
  cuda::sm90::FwdArgs args = fwd_args(p, tile.block_m);
  args.pingpong = pingpong_enabled();  // FLASHATTN_SM90_PINGPONG=0: the A/B arm without turns
  if (int64_t(args.num_m_blocks) * p.heads * p.batch == 0) return;
  set_qkv_maps(args, p, tile.block_m, tile.block_n);
  cuda::sm90::run_fwd_fp8<128>(args, stream);
}
#endif

void run_fwd(const FwdProblem& p, Stream stream) {
#if defined(FLASHATTN_SM90A)
  cuda::DeviceGuard guard(p.device);
  if (p.dtype == DType::fp8_e4m3) {
    run_fwd_fp8(p, static_cast<cudaStream_t>(stream));
    return;
  }
  const int bucket = fwd_bucket(p.head_dim);
  const cuda::sm90::Sm90FwdTile tile = fwd_tile(bucket);
  cuda::sm90::FwdArgs args = fwd_args(p, tile.block_m);
  args.pingpong = pingpong_enabled();
  args.overlap = overlap_enabled();
  args.max_slack = max_slack();
  args.tma_store = tma_store_enabled(p);
  const bool general = cuda::attn::needs_general_fwd(p);
  const FwdGrid grid = cuda::sm90::fwd_persistent(bucket, general) ? fwd_grid(p) : FwdGrid::per_tile;
  args.persistent_ctas = grid != FwdGrid::per_tile ? cuda::device_props(p.device.index).sms : 0;
  args.order = fwd_tile_order(p, tile.block_m);
  if (int64_t(args.num_m_blocks) * p.heads * p.batch == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  // The dynamic order's counter: one zeroed word, freed (stream-ordered) after the kernel.
  cuda::Workspace counter(grid == FwdGrid::dynamic_tiles ? sizeof(uint32_t) : 0, s);
  if (grid == FwdGrid::dynamic_tiles) {
    args.tile_counter = counter.as<uint32_t>();
    FA_CUDA_CHECK(cudaMemsetAsync(args.tile_counter, 0, sizeof(uint32_t), s));
  }
  int key_box_rows = tile.block_n;
  if (p.paged_kv()) {
    args.paged_box_rows = key_box_rows = cuda::sm90::paged_box_rows(p.paged.page_size, tile.block_n);
    args.paged_rows = paged_rows_copy(args.paged_box_rows);
    if (args.paged_rows) args.page_div = cuda::attn::make_fast_divmod(uint32_t(p.paged.page_size));
    // An empty pool: no entry is read; every box is outside the map (zeros; the map's one block is never
    // loaded), every copied row zero-filled.
    args.paged_columns = p.paged.num_blocks > 0 ? int(p.paged.capacity / p.paged.page_size) : 0;
  }
  set_qkv_maps(args, p, tile.block_m, args.paged_rows ? 1 : key_box_rows);  // k_map, v_map unused with rows
  if (args.tma_store)
    args.o_map =
        cuda::sm90::make_rows_map(p.out, p.dtype, p.head_dim, p.seqlen_q, p.heads, p.batch, cuda::sm90::kWgmmaRows);
  if (bucket == 64)
    run_bucket<64>(args, p.dtype, general, s);
  else if (bucket == 128)
    run_bucket<128>(args, p.dtype, general, s);
  else if (bucket == 192)
    run_bucket<192>(args, p.dtype, general, s);
  else
    run_bucket<256>(args, p.dtype, general, s);
#else
  (void)p;
  (void)stream;
  throw Error(Status::internal,
              "flashattn: cuda_sm90: no sm_90a code in this build (supports_fwd should have refused)");
#endif
}

std::string supports_bwd(const BwdProblem& p) {
#if !defined(FLASHATTN_SM90A)
  (void)p;
  return "this build has no sm_90a code (FLASHATTN_CUDA_ARCHS without 90a)";
#else
  const int bucket = bwd_bucket(p.head_dim);
  if (std::string why =
          kernel_reason(p, bucket, "the sm90 backward takes multiples of 8 in (32, 128]; cuda_sm80 runs the others");
      !why.empty())
    return why;
  constexpr int64_t kMaxCoord = int64_t(1) << 30;
  if (map_rows_q(p) > kMaxCoord || map_rows_k(p) > kMaxCoord || p.seqlen_q > kMaxCoord || p.seqlen_k > kMaxCoord ||
      p.heads > kMaxCoord || p.batch > kMaxCoord)
    return "a dimension above 2^30 (32-bit TMA coordinates)";
  const cuda::sm90::Sm90BwdTile tile = bwd_tile(bucket);
  const int64_t rows = p.total_q * p.heads;
  const int64_t blocks = cuda::ceil_div(p.seqlen_k, tile.block_n) * p.heads_k * p.batch;
  if (blocks > cuda::kMaxGridX) return "the backward has " + std::to_string(blocks) + " key tiles, above 2^31 - 1";
  if (cuda::ceil_div(rows, 8) > cuda::kMaxGridX || cuda::ceil_div(rows * (p.head_dim / 8), 256) > cuda::kMaxGridX)
    return "the backward's D and dQ kernels need more than 2^31 - 1 CTAs";
  for (const auto& [view, rows_, heads, batch, name] :
       {std::tuple{p.q, map_rows_q(p), p.heads, map_batch(p), "q"},
        std::tuple{p.dout, map_rows_q(p), p.heads, map_batch(p), "dout"},
        std::tuple{p.k, map_rows_k(p), p.heads_k, map_batch_k(p), "k"},
        std::tuple{p.v, map_rows_k(p), p.heads_k, map_batch_k(p), "v"}})
    if (std::string r = cuda::sm90::tma_view_reason(view, 2, rows_, heads, batch, name); !r.empty()) return r;
  // out is read by the D kernel, dq written by the dQ conversion and dk, dv by the epilogue: 16-byte chunks.
  for (const auto& [view, name] :
       {std::pair{p.out, "out"}, std::pair{p.dq, "dq"}, std::pair{p.dk, "dk"}, std::pair{p.dv, "dv"}})
    if (std::string r = cuda::unaligned16_reason(name, view, 2); !r.empty()) return r;
  return device_and_smem_reason(p.device.index, tile.smem_bytes());
#endif
}

void run_bwd(const BwdProblem& p, Stream stream) {
#if defined(FLASHATTN_SM90A)
  cuda::DeviceGuard guard(p.device);
  const cuda::sm90::Sm90BwdTile tile = bwd_tile(bwd_bucket(p.head_dim));
  cuda::sm90::BwdArgs args;
  args.base.p = p;
  args.base.s = cuda::attn::make_score_args(p);
  args.base.num_n_blocks = int(cuda::ceil_div(p.seqlen_k, tile.block_n));
  args.q_map = cuda::sm90::make_rows_map(p.q, p.dtype, p.head_dim, map_rows_q(p), p.heads, map_batch(p), tile.block_m);
  args.do_map =
      cuda::sm90::make_rows_map(p.dout, p.dtype, p.head_dim, map_rows_q(p), p.heads, map_batch(p), tile.block_m);
  args.k_map =
      cuda::sm90::make_rows_map(p.k, p.dtype, p.head_dim, map_rows_k(p), p.heads_k, map_batch_k(p), tile.block_n);
  args.v_map =
      cuda::sm90::make_rows_map(p.v, p.dtype, p.head_dim, map_rows_k(p), p.heads_k, map_batch_k(p), tile.block_n);
  args.dq_bulk = bwd_dq_bulk_enabled();
  cuda::sm90::launch_bwd(args, static_cast<cudaStream_t>(stream));
#else
  (void)p;
  (void)stream;
  throw Error(Status::internal,
              "flashattn: cuda_sm90: no sm_90a code in this build (supports_bwd should have refused)");
#endif
}

}  // namespace

const Backend& cuda_sm90_backend() {
  static const Backend b = [] {
    Backend x;
    x.name = "cuda_sm90";
    x.device = DeviceType::cuda;
    x.supports_fwd = &supports_fwd;
    x.run_fwd = &run_fwd;
    x.defer_fwd = &defer_fwd;
    x.paged_varlen_fwd = true;
    x.supports_bwd = &supports_bwd;
    x.run_bwd = &run_bwd;
    x.defer_bwd = &defer_bwd;
    return x;
  }();
  return b;
}

}  // namespace flashattn::detail
