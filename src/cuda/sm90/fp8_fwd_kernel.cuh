#pragma once

// The native FP8 forward on sm_90 (issue 32): q, k, v in e4m3 with (batch, kv head) descale factors, out
// bf16, LSE fp32; head dim 128, dense calls (no varlen, no paged K/V), causal and windows, GQA; softcap, ALiBi
// and dropout are declined (cuda_fp8's bf16 path runs them). One CTA per work tile (query tile, head,
// sequence), three warpgroups:
//   warpgroup 0: warp 0 loads each visited K and V tile (and Q, with the first) by TMA into a ring of stages
//     (fp8_fwd_layout.h); warps 1-3 turn each V tile into V^T (8-bit wgmma reads B only K-major), writing key
//     fp8_pv_key(k) of each 32-key step at column k, and arrive on vt_full;
//   warpgroups 1, 2: 64 query rows each: S = Q K^T (wgmma k32 e4m3, both operands in shared memory), the
//     mask and online softmax of the 16-bit kernels on the fp32 accumulators (scale: softmax_scale x log2(e) x
//     q_descale x k_descale), P x 2^8 packed to e4m3 in place (fp8_pack_source: each byte is one of the
//     thread's own S values), O += P V^T (wgmma k32, P from registers), then O x v_descale / (2^8 l) stored as
//     bf16 pairs from registers, and the LSE. Tile n + 1's Q K^T is issued before tile n's P V, so that its
//     softmax runs while P V is on the tensor cores, and the two warpgroups take turns at issuing (ping-pong).
// The dispatcher runs it only where it is named (backend "cuda_sm90") or FLASHATTN_SM90_FP8=1 is set
// (sm90/backend.cpp) until it measures faster than cuda_fp8's bf16 copies.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/sm90/fp8_fwd_layout.h"
#include "cuda/sm90/fwd_kernel.cuh"

namespace flashattn::detail::cuda::sm90 {

inline constexpr Sm90Fp8FwdTile kFp8Tile = fp8_fwd_tile(128);
inline constexpr int kFp8Transposers = 3 * 32;  // warps 1-3 of the producer warpgroup
inline constexpr uint32_t kFp8TurnBarrier = 1;  // named barriers 1, 2: the consumers' ping-pong turns

// The mbarriers after the tiles: q_full, then per stage k_full, v_full (TMA bytes), vt_full (the
// transposers' arrivals) and empty (the consumers').
struct Fp8Barriers {
  uint32_t q_full;
  __device__ __forceinline__ uint32_t k_full(int s) const { return q_full + 8u * uint32_t(1 + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return q_full + 8u * uint32_t(1 + kFp8Tile.stages + s); }
  __device__ __forceinline__ uint32_t vt_full(int s) const {
    return q_full + 8u * uint32_t(1 + 2 * kFp8Tile.stages + s);
  }
  __device__ __forceinline__ uint32_t empty(int s) const { return q_full + 8u * uint32_t(1 + 3 * kFp8Tile.stages + s); }
};

// V (block_n keys x 128 head-dim bytes, as TMA landed it) into V^T (128 head-dim rows x block_n key bytes,
// column 32 s + k holding key 32 s + fp8_pv_key(k)). A thread takes 4 head dims x 4 columns at a time, in the
// blocks fp8_transpose_block deals (no bank conflicts on either side): the 4 columns 4t .. 4t + 3 of a 16-key
// half are keys 2t, 2t + 1, 2t + 8, 2t + 9 of it, whose 4 bytes at the head dims are one 32-bit load each;
// byte permutes make the 4 rows of V^T, one 32-bit store each.
__device__ __forceinline__ void transpose_v(uint32_t v, uint32_t vt, int tt) {
  static_assert(kFp8Tile.head_dim == 4 * 32 && kFp8Tile.block_n == 4 * kFp8TransposePasses,
                "a lane's head dims and a pass's columns cover the stage");
  const int lane = tt % 32;
  for (int pass = tt / 32; pass < kFp8TransposePasses; pass += kFp8Transposers / 32) {
    const Fp8TransposeBlock blk = fp8_transpose_block(lane, pass);
    const int d0 = blk.d0, c0 = blk.c0;
    const int half0 = c0 & ~15, t = (c0 % 16) / 4;
    const int key0 = half0 + 2 * t, key2 = half0 + 8 + 2 * t;
    const uint32_t a = ptx::ld_shared_u32(v + swizzled_row_byte(key0, d0));
    const uint32_t b = ptx::ld_shared_u32(v + swizzled_row_byte(key0 + 1, d0));
    const uint32_t c = ptx::ld_shared_u32(v + swizzled_row_byte(key2, d0));
    const uint32_t d = ptx::ld_shared_u32(v + swizzled_row_byte(key2 + 1, d0));
    const uint32_t ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);
    const uint32_t cd_lo = __byte_perm(c, d, 0x5140), cd_hi = __byte_perm(c, d, 0x7362);
    ptx::st_shared_u32(vt + swizzled_row_byte(d0, c0), __byte_perm(ab_lo, cd_lo, 0x5410));
    ptx::st_shared_u32(vt + swizzled_row_byte(d0 + 1, c0), __byte_perm(ab_lo, cd_lo, 0x7632));
    ptx::st_shared_u32(vt + swizzled_row_byte(d0 + 2, c0), __byte_perm(ab_hi, cd_hi, 0x5410));
    ptx::st_shared_u32(vt + swizzled_row_byte(d0 + 3, c0), __byte_perm(ab_hi, cd_hi, 0x7632));
  }
}

// Four fp32 probabilities (already scaled) as four e4m3 bytes, the first in the lowest.
__device__ __forceinline__ uint32_t pack_e4m3x4(float p0, float p1, float p2, float p3) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(p0, p1), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(p2, p3), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

template <int kHeadDim>
__global__ void __launch_bounds__(3 * kWarpgroupThreads, 1) fp8_fwd_kernel(const __grid_constant__ FwdArgs args) {
  constexpr Sm90Fp8FwdTile kTile = fp8_fwd_tile(kHeadDim);
  static_assert(kTile.head_dim == kFp8Tile.head_dim, "the transpose and barriers are written for kFp8Tile");
  constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kStages = kTile.stages;
  constexpr int kSFrags = kBlockN / 8, kOFrags = kTile.head_dim / 8, kSteps = kBlockN / 32;
  constexpr int kQKSteps = kTile.head_dim / 32;
  constexpr uint32_t kConsumerThreads = 2 * kWarpgroupThreads;
  static_assert(kTile.head_dim == 128 && kBlockN == 128 && kBlockM == 2 * kWgmmaRows,
                "one 128-byte panel per row of Q, K and V^T; m64n128k32 products");
  // 40 / 232: the consumers hold O, the next tile's S and this tile's packed P at once (the overlap below);
  // at 56 / 224 they spilled 84 bytes.
  static_assert(setmaxnreg_fits(3, 40, 232), "setmaxnreg budgets exceed the CTA's registers");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const uint32_t base = raw_addr + (kSwizzleAtomBytes - raw_addr % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  const Fp8Barriers bars{base + uint32_t(kTile.barrier_offset())};
  const int warpgroup = int(threadIdx.x) / kWarpgroupThreads;
  const FwdProblem& p = args.p;

  if (threadIdx.x == 0) {
    async::mbarrier_init(bars.q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      async::mbarrier_init(bars.k_full(s), 1);
      async::mbarrier_init(bars.v_full(s), 1);
      async::mbarrier_init(bars.vt_full(s), kFp8Transposers);
      async::mbarrier_init(bars.empty(s), kConsumerThreads);
    }
    async::fence_mbarrier_init();
  }
  __syncthreads();

  const Sm90TilePlace t = place_tile<kBlockM, kBlockN, false>(args, blockIdx.x);
  if (t.valid_rows == 0) return;  // uniform over the CTA
  const int hk = int(t.h) / args.group;

  if (warpgroup == 0) {
    async::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      async::prefetch_tensormap(&args.q_map);
      async::prefetch_tensormap(&args.k_map);
      async::prefetch_tensormap(&args.v_map);
      PipelineState<kStages> ring;
      for (int n = t.n_begin; n < t.n_end; ++n) {
        async::mbarrier_wait(bars.empty(ring.stage), ring.empty_parity());
        const int row = n * kBlockN;
        async::mbarrier_arrive_expect_tx(bars.k_full(ring.stage), uint32_t(kTile.kv_bytes()));
        async::tma_load_4d(base + uint32_t(kTile.k_offset(ring.stage)), &args.k_map, bars.k_full(ring.stage), 0, row,
                           hk, int(t.b));
        if (n == t.n_begin) {
          async::mbarrier_arrive_expect_tx(bars.q_full, uint32_t(kTile.q_bytes()));
          async::tma_load_4d(base, &args.q_map, bars.q_full, 0, int(t.m0), int(t.h), int(t.b));
        }
        async::mbarrier_arrive_expect_tx(bars.v_full(ring.stage), uint32_t(kTile.kv_bytes()));
        async::tma_load_4d(base + uint32_t(kTile.v_offset(ring.stage)), &args.v_map, bars.v_full(ring.stage), 0, row,
                           hk, int(t.b));
        ring.advance();
      }
    } else if (threadIdx.x >= 32) {
      const int tt = int(threadIdx.x) - 32;
      PipelineState<kStages> ring;
      for (int n = t.n_begin; n < t.n_end; ++n) {
        async::mbarrier_wait(bars.v_full(ring.stage), ring.full_parity());
        transpose_v(base + uint32_t(kTile.v_offset(ring.stage)), base + uint32_t(kTile.vt_offset(ring.stage)), tt);
        wgmma::fence_proxy_async();  // the generic-proxy writes of V^T before the consumers' wgmma reads them
        async::mbarrier_arrive(bars.vt_full(ring.stage));
        ring.advance();
      }
    }
    return;
  }

  async::setmaxnreg_inc<232>();
  const int consumer = warpgroup - 1;
  const int tid = int(threadIdx.x) % kWarpgroupThreads, lane = tid & 31, warp = tid >> 5;
  const int wg_row0 = consumer * kWgmmaRows, warp_row0 = wg_row0 + 16 * warp;
  const Mask mask = make_mask(p.score, t.seq.sq, t.seq.sk);
  const float scale = args.scale_log2 * p.q_descale.at(t.b, hk) * p.k_descale.at(t.b, hk);
  // P = exp2(s - max) in [0, 1] is stored x 2^8 (fp8_p_scale(0)), the factor folded into exp2's exponent, so
  // P, the row sums and O all carry it and the output's O / l does not; the LSE takes it out.
  constexpr float kPLog2 = 8.0f;

  float o[kOFrags][4];
#pragma unroll
  for (int j = 0; j < kOFrags; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  attn::OnlineSoftmax<1> softmax;
  softmax.init();
  float s[1][kSFrags][4];
  const uint64_t q_desc = wgmma::smem_desc(base + kmajor_start(kBlockM, wg_row0, 0), 16, kSwizzleAtomBytes);
  // S = Q K^T of tile n (stage `at`) into s, issued and committed; the caller waits for it.
  const auto issue_scores = [&](const PipelineState<kStages>& at) {
    async::mbarrier_wait(bars.k_full(at.stage), at.full_parity());
#pragma unroll
    for (int j = 0; j < kSFrags; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][j][e] = 0.0f;
    const uint64_t k_desc = wgmma::smem_desc(base + uint32_t(kTile.k_offset(at.stage)), 16, kSwizzleAtomBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kQKSteps; ++kk)
      wgmma::mma_ss_m64k32_e4m3(s[0], wgmma::desc_advance(q_desc, kmajor_start(kBlockM, 0, kk)),
                                wgmma::desc_advance(k_desc, kmajor_start(kBlockN, 0, kk)));
    wgmma::commit_group();
  };

  // Mask and online softmax of key tile n in s; O's factors in rescale.
  const auto softmax_only = [&](int n, float(&rescale)[1][2]) {
    const int64_t key0 = int64_t(n) * kBlockN;
    if (!attn::tile_fully_visible(mask, t.m0, t.m0 + t.valid_rows - 1, key0, key0 + kBlockN - 1))
      attn::mask_rowmajor(s, mask, t.m0 + warp_row0, key0, lane);
    softmax.update(s, rescale, scale, 0.0f, kPLog2);
  };
  const auto rescale_o = [&](const float(&rescale)[1][2]) {
    if (__any_sync(0xffffffffu, rescale[0][0] != 1.0f || rescale[0][1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < kOFrags; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] *= rescale[0][e >> 1];
    }
  };
  uint32_t pa[kSteps][4];  // P of tile n as e4m3, read by its P V until that product is waited for
  // P x 2^8 (as the softmax left it in s) packed to e4m3 (each byte one of this thread's own values).
  const auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const Fp8PackSource src = fp8_pack_source(r, i);
          b[i] = s[0][4 * kk + src.group][src.element];
        }
        pa[kk][r] = pack_e4m3x4(b[0], b[1], b[2], b[3]);
      }
  };
  // O += P V^T of the tile in stage `at`, issued and committed.
  const auto issue_pv = [&](const PipelineState<kStages>& at) {
    async::mbarrier_wait(bars.vt_full(at.stage), at.full_parity());
    const uint64_t vt_desc = wgmma::smem_desc(base + uint32_t(kTile.vt_offset(at.stage)), 16, kSwizzleAtomBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
      wgmma::mma_rs_m64k32_e4m3(o, pa[kk], wgmma::desc_advance(vt_desc, kmajor_start(kTile.head_dim, 0, kk)));
    wgmma::commit_group();
  };

  // Software-pipelined as the 16-bit kernel's overlap (fwd_kernel.cuh): tile n + 1's Q K^T is issued before
  // tile n's P V, and its softmax runs while that product is on the tensor cores; O's rescale for tile n + 1
  // waits for the product. Every pass issues both products unconditionally and the last tile's P V is
  // issued after the loop: a product issued under a condition while another is in flight makes ptxas
  // serialise every wgmma of the kernel (C7514).
  // Ping-pong (args.pingpong), as the 16-bit kernel's: the two warpgroups take turns at issuing their
  // products (a turn: the products of one pass), so that one's softmax runs while the other's products
  // occupy the tensor cores. Warpgroup c syncs on named barrier kFp8TurnBarrier + c, the other arrives
  // there after its issue; consumer 1 hands warpgroup 0 the first turn and does not hand over after its
  // last, so every sync has exactly one arrival (both warpgroups visit the same key tiles).
  const bool pingpong = args.pingpong;
  const uint32_t my_turn = kFp8TurnBarrier + uint32_t(consumer), other_turn = kFp8TurnBarrier + uint32_t(consumer ^ 1);
  constexpr uint32_t kTurnThreads = 2 * kWarpgroupThreads;
  PipelineState<kStages> ring;
  int n = t.n_begin;
  if (n < t.n_end) {
    async::mbarrier_wait(bars.q_full, 0);
    if (pingpong) {
      async::named_barrier_arrive(consumer == 1, other_turn, kTurnThreads);
      async::named_barrier_sync(my_turn, kTurnThreads);
    }
    issue_scores(ring);
    async::named_barrier_arrive(pingpong, other_turn, kTurnThreads);
    wgmma::wait_group<0>();
    wgmma::fence_operands(s[0]);
    float rescale[1][2];
    softmax_only(n, rescale);  // O is still zero: nothing to rescale
  }
  for (; n + 1 < t.n_end; ++n) {
    pack_p();
    PipelineState<kStages> next = ring;
    next.advance();
    if (pingpong) async::named_barrier_sync(my_turn, kTurnThreads);
    issue_scores(next);
    issue_pv(ring);
    async::named_barrier_arrive(pingpong, other_turn, kTurnThreads);
    wgmma::wait_group<1>();  // groups complete in issue order: Q K^T of tile n + 1 is done
    wgmma::fence_operands(s[0]);
    float rescale[1][2];
    softmax_only(n + 1, rescale);
    // Without this ptxas moves the wait below up to the row max, and the softmax runs after P V.
    wgmma::hold_wait_after(softmax.row_sum[0][0] + softmax.row_sum[0][1], base);
    wgmma::wait_group<0>();
    wgmma::fence_operands(o);
    wgmma::fence_operands(pa);
    async::mbarrier_arrive(bars.empty(ring.stage));  // the tensor cores are done reading K, V^T (V was read before)
    rescale_o(rescale);
    ring = next;
  }
  if (n < t.n_end) {
    pack_p();
    if (pingpong) async::named_barrier_sync(my_turn, kTurnThreads);
    issue_pv(ring);
    async::named_barrier_arrive(pingpong && consumer == 0, other_turn, kTurnThreads);
    wgmma::wait_group<0>();
    wgmma::fence_operands(o);
    wgmma::fence_operands(pa);
    async::mbarrier_arrive(bars.empty(ring.stage));
  }

  // Epilogue: O x v_descale / (2^8 l) as bf16 pairs, straight from the accumulators (row g and g + 8 of the
  // warp's 16, columns 8j + 2t, 8j + 2t + 1), rows past the sequence not stored; then the LSE.
  softmax.reduce_sums();
  const float v_scale = p.v_descale.at(t.b, hk);
  __nv_bfloat16* out_tile =
      static_cast<__nv_bfloat16*>(p.out.ptr) + p.out.offset(t.b, t.seq.q_start + t.m0 + warp_row0, t.h);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = (lane >> 2) + 8 * half;
    if (warp_row0 + row >= t.valid_rows) continue;
    const float f = softmax.out_scale(0, half, v_scale);
    __nv_bfloat16* out_row = out_tile + int64_t(row) * p.out.row_stride;
#pragma unroll
    for (int j = 0; j < kOFrags; ++j)
      *reinterpret_cast<__nv_bfloat162*>(out_row + 8 * j + 2 * (lane & 3)) =
          __floats2bfloat162_rn(o[j][2 * half] * f, o[j][2 * half + 1] * f);
  }
  if (p.lse.ptr != nullptr && (lane & 3) == 0) {
    float* lse_tile = p.lse.ptr + p.lse.offset(t.b, t.seq.q_start + t.m0, t.h);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + (lane >> 2) + 8 * half;
      if (row < t.valid_rows) lse_tile[row] = softmax.lse(0, half) - kPLog2 * attn::kLn2;
    }
  }
}

// Launches the FP8 forward (fp8_fwd.cu, sm_90a only): one CTA per work tile.
template <int kHeadDim>
void run_fwd_fp8(const FwdArgs& args, cudaStream_t stream) {
  constexpr Sm90Fp8FwdTile kTile = fp8_fwd_tile(kHeadDim);
  const int64_t tiles = int64_t(args.num_m_blocks) * args.p.heads * args.p.batch;
  if (tiles == 0) return;
  auto kernel = fp8_fwd_kernel<kHeadDim>;
  allow_dynamic_smem(kernel, size_t(kTile.smem_bytes()), args.p.device.index, "sm90 FP8 forward");
  kernel<<<grid_1d(tiles, "sm90 FP8 forward"), 3 * kWarpgroupThreads, kTile.smem_bytes(), stream>>>(args);
  FA_CUDA_CHECK_LAUNCH("sm90 FP8 forward kernel");
}

}  // namespace flashattn::detail::cuda::sm90
