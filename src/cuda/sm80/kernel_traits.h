#pragma once

// Tile configuration of the sm80 tensor-core FlashAttention-2 kernels: one constexpr function per
// kernel family, so host code, kernels and tests see the same numbers. Plain C++ (no CUDA headers).
//
// Head dims are compiled in the buckets of attn/head_dim.h.
//
// The numbers trade register pressure against reuse. mma.sync keeps every accumulator in registers
// (255 per thread at most), and each warp re-reads the whole shared-memory B operand of a product, so
// a warp that owns more rows reuses each byte it reads more often (a warp with 16 rows does 16 flops per
// shared-memory byte, one with 32 rows 32) but needs twice the accumulator registers.

#include <cstdint>

#include "cuda/attn/head_dim.h"

namespace flashattn::detail::cuda::sm80 {

// The sm80 kernels are built on the shared attention pieces (src/cuda/attn/).
using namespace attn;

// Bytes of one 16-bit element (f16, bf16): the only storage types of these kernels.
inline constexpr int kElemBytes = 2;

// Forward: one CTA per (kBlockM query rows, head, sequence). Warp w owns the query rows
// [w * 16 * m_frags, (w + 1) * 16 * m_frags) of the tile for the whole kernel: their S tile, running
// max/sum and O accumulator live in its registers, so the softmax needs no cross-warp communication.
//   registers per thread ~ O (m_frags * head_dim / 2) + S (m_frags * block_n / 2) [+ Q (m_frags * head_dim / 4)]
//   plus ~60-100 for addresses, sequence bounds, the mask and the softmax state (measured with
//   -Xptxas -v; numbers in docs/kernels.md). Each choice is the largest that compiles without spills:
//   D <= 64:  128 x 64, 4 warps x 32 rows, Q kept in registers.
//   D 96-128: 128 x 32, 4 warps x 32 rows, Q re-read from shared memory every K tile: O alone is 96-128
//             registers, a 64-key S tile (64 more) spills.
//   D > 128:  128 x 64 (x 32 from 192 on), 8 warps x 16 rows: O is 80-128 registers, so a warp owns one
//             16-row fragment; 8 warps keep the 128-row reuse of every K/V tile per CTA.
// The feature-free instance (general = false) has the registers for larger tiles: 128 x 128 at D <= 64
// (FlashAttention-2's tile; Q re-read from shared memory, as 128 keys with Q in registers spill) and
// 64-key tiles at every D from 96 on (half the Q re-reads from shared memory per key, and half the
// barriers). With the row-step tile loads of tile_copy.cuh every one of them compiles without spills on
// sm_90a (numbers in docs/kernels.md).
struct FwdTile {
  int head_dim;
  int block_m, block_n;
  int warps;
  int m_frags;  // 16-row MMA fragments per warp
  bool q_in_regs;

  constexpr int threads() const { return warps * 32; }
  constexpr int warp_rows() const { return 16 * m_frags; }
  // Q tile + one K tile + one V tile (see fwd_kernel.cuh for why one buffer each suffices).
  constexpr int64_t smem_bytes() const { return int64_t(block_m + 2 * block_n) * head_dim * kElemBytes; }
};

// `general`: the instance that also handles dropout, softcap and ALiBi (attn/score_args.h, needs_general_fwd). The
// feature-free instance needs fewer registers, which its larger tiles spend.
// `paired` (feature-free, D >= 160; use_paired_fwd decides): 64 rows with 4 warps instead of 128 with 8,
// the same warp tile (16 rows x 64 keys), so that two CTAs share an SM: while one waits at a barrier or
// in the softmax the other issues MMAs. Nsight Compute put FlashAttention-2's D = 256 forward (this
// shape, two CTAs per SM) at IPC 1.26 against 1.14 for 128 x 64 with 8 warps, on the same instruction
// count (bench/NOTES.md). The pairing measured faster than 128 rows at every point of D = 192, 224 and
// 256.
constexpr bool has_paired_fwd(int bucket, bool general) { return !general && bucket >= 160; }
constexpr FwdTile fwd_tile(int bucket, bool general = true, bool paired = false) {
  if (bucket <= 64) return FwdTile{bucket, 128, general ? 64 : 128, 4, 2, general};
  if (bucket <= 128) return FwdTile{bucket, 128, general ? 32 : 64, 4, 2, false};
  if (paired && has_paired_fwd(bucket, general)) return FwdTile{bucket, 64, 64, 4, 1, false};
  const bool wide = bucket <= 160 || !general;
  return FwdTile{bucket, 128, wide ? 64 : 32, 8, 1, false};
}
// Whether a call runs the general instance: when it needs it (needs_general_fwd), and also where the
// feature-free tile does not fit the device's per-CTA shared memory: sm_86/89 allow 99 KB, and the
// feature-free 128 x 64 tile needs 112 KB at D = 224 and 128 KB at D = 256, the general 128 x 32 tile 84
// and 96 KB (slower, but the call runs on tensor cores instead of being refused).
constexpr bool fwd_general(bool needs_general, int bucket, int64_t smem_optin) {
  return needs_general || fwd_tile(bucket, false).smem_bytes() > smem_optin;
}
// Whether a device runs the paired tile: it must hold two of them at once (shared memory per SM, with
// the 1 KB the hardware reserves per CTA), and be sm_90 or newer: the pairing was measured on the H200
// only, and on sm_80 FlashAttention-2 itself keeps 128 rows at these head dims.
constexpr bool use_paired_fwd(int bucket, bool general, int cc_major, int64_t smem_per_sm) {
  return has_paired_fwd(bucket, general) && cc_major >= 9 &&
         2 * (fwd_tile(bucket, general, true).smem_bytes() + 1024) <= smem_per_sm;
}

// The forward mainloop's code-shape knobs per bucket (fwd_mainloop.cuh), each on where it measured faster
// in interleaved A/Bs on the H200 of the feature-free forwards (bench/NOTES.md has the runs):
//   pin_lanes: ldmatrix addresses pinned per lane (smem_layout.h, LdsmAt): D = 96 +7.4% at S 1k,
//     D = 256 +1.5-2.1% at S 512-4k, D = 64 +1.5% at 2k; D = 128 +1.3% at 512 but -1.4% at 4k,
//     D = 192 -1.8%, D = 224 -1.6%, D = 160 +0.3%. At D = 32 they push the 128-key tile into 36-48
//     bytes of spills on sm_90a.
//   spread_v: V's copies issued between the k-steps of the first half of S = Q K^T instead of in one
//     burst before it: D = 128 +0.9% at S 512 and +1.9% at 4k, D = 96 +1.1% at 4k (1.000 at 1k);
//     D = 256 -0.8 to -1.9%, and D = 64 -7.5% (its 128-key tile then spills 68 bytes).
//   exp_in_pv: P computed one k16 slice at a time inside P V, so the slice's exp2 overlap the previous
//     slice's MMAs: D = 64 +4.7% (S 2k) and +4.2% (512), D = 192 +4.0% (4k), D = 160 +4.2% (2k), D = 32
//     +1.9% (2k); D = 128 -2.8% (4k), D = 224 -4.8% (2k), D = 256 -0.5 to -2.0% (S 512-4k); at D = 96
//     it spills 28 bytes. Feature-free only: with dropout the row sums must use the undropped P, so the
//     general instance computes the whole tile's P first.
struct FwdKnobs {
  bool pin_lanes, spread_v, exp_in_pv;
};
constexpr FwdKnobs fwd_knobs(int bucket, bool general) {
  return FwdKnobs{bucket == 64 || bucket == 96 || bucket == 256, bucket == 96 || bucket == 128,
                  !general && (bucket == 32 || bucket == 64 || bucket == 160 || bucket == 192)};
}

// Shared memory a CTA may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin): 163 KB on sm_80 (A100),
// 227 KB on sm_90 (H100, H200). sm_86/89 allow 99 KB, less than the backward's tiles need.
inline constexpr int64_t kSm80SmemBytes = 163 * 1024;
inline constexpr int64_t kSm90SmemBytes = 227 * 1024;

// Backward main kernel: one CTA per (block_n keys, kv head, sequence); it loops over the query heads of
// its GQA group and over query tiles of block_m rows. Two partitions of a step over the warps:
//
// Tiled (tiled = true, FlashAttention-2's partition; bwd_tiled_kernel.cuh): each of the three products
// of a step has its own 2-D grid of warp tiles, and P and dS go through shared memory between them:
//   S, dP (queries x keys):    sdp_warps_m x (warps / sdp_warps_m) warp tiles
//   dV, dK (keys x head dim):  dkv_warps_n x (warps / dkv_warps_n), accumulated in registers all along
//   dQ (queries x head dim):   dq_warps_m x (warps / dq_warps_m), added to dq_accum with atomics
// Warp tiles are at least 16 x 32 and a step covers 64-128 queries (vs 16-row warp tiles and 32
// queries for keys as rows): fewer ldmatrix per MMA, more independent MMAs in flight per warp, half the
// barriers per query. Phases 1 and 3 walk their tiles in groups of 16-row fragments (two at D <= 64,
// one above), with S and dP of a group computed in one interleaved k loop.
//   registers ~ dK + dV (2 block_n head_dim / threads) + S + dP + dQ of one group + ~90 (measured):
//   D <= 64:  128 keys x 128 queries, 8 warps: S/dP 64 x 32, dK/dV 32 x head_dim / 2, dQ 32 x head_dim / 2.
//   D 96-128: 128 keys x 64 queries, 8 warps: S/dP 32 x 32, dK/dV 32 x head_dim / 4, dQ 32 x 32 at
//             D = 128 (16 x 48 at D = 96: 24 columns are not whole 16-column MMA blocks).
//   D > 128:  64 keys x 64 queries, 8 warps (FlashAttention-2's choice): S/dP 16 x 32; dK/dV 32 x D / 4
//             at D = 192 and 256 (96 and 128 accumulator registers), 16 x D / 2 at D = 160 and 224
//             (D / 4 is not a multiple of 16 there); dQ likewise. Shared memory: 137 KB at D = 160,
//             161 KB at 192, 185 KB at 224 and 209 KB at 256; the last two exceed sm_80's 163 KB.
//
// Keys as rows (tiled = false; bwd_kernel.cuh): the fallback for D = 224 and 256 where the device
// cannot give the tiled kernel its shared memory (sm_80). Warp w owns the keys [16 w, 16 w + 16): it
// computes S^T = K Q^T and dP^T = V dO^T for them, so P^T and dS^T come out of the MMA already in the
// A-operand layout of dV += P^T dO and dK += dS^T Q and never touch shared memory; dK and dV stay in
// its registers for the whole loop; only dS^T goes through shared memory, for dQ. dK + dV alone would
// need 224-256 registers, so the kernel runs twice: once accumulating dV only, once dK (and
// dQ) only; 64 keys (4 warps) x 32 queries.
struct BwdTile {
  int head_dim;
  int block_n, block_m;
  int warps;
  bool tiled = false;
  int sdp_warps_m = 1;  // tiled: warps along the queries of S and dP (the others along the keys)
  int dkv_warps_n = 1;  // tiled: warps along the keys of dK and dV (the others along the head dim)
  int dq_warps_m = 1;   // tiled: warps along the queries of dQ (the others along the head dim)
  constexpr int threads() const { return warps * 32; }
  // Keys as rows: dQ = dS K runs on the same warps re-partitioned: row groups of 16 queries x column
  // groups of the head dim.
  constexpr int dq_row_groups() const { return block_m / 16; }
  constexpr int dq_col_groups() const { return warps / dq_row_groups(); }
  constexpr int dq_cols_per_warp() const { return head_dim / dq_col_groups(); }
  // Tiled: warp tiles of the three phases (rows x cols) and the origin of warp w's tile in its phase's
  // grid (warps numbered row-major over the grid).
  struct Origin {
    int row, col;
  };
  constexpr int sdp_tile_rows() const { return block_m / sdp_warps_m; }           // queries
  constexpr int sdp_tile_cols() const { return block_n * sdp_warps_m / warps; }   // keys
  constexpr int dkv_tile_rows() const { return block_n / dkv_warps_n; }           // keys
  constexpr int dkv_tile_cols() const { return head_dim * dkv_warps_n / warps; }  // head dims
  constexpr int dq_tile_rows() const { return block_m / dq_warps_m; }             // queries
  constexpr int dq_tile_cols() const { return head_dim * dq_warps_m / warps; }    // head dims
  constexpr Origin sdp_origin(int w) const {
    return {sdp_tile_rows() * (w / (warps / sdp_warps_m)), sdp_tile_cols() * (w % (warps / sdp_warps_m))};
  }
  constexpr Origin dkv_origin(int w) const {
    return {dkv_tile_rows() * (w / (warps / dkv_warps_n)), dkv_tile_cols() * (w % (warps / dkv_warps_n))};
  }
  constexpr Origin dq_origin(int w) const {
    return {dq_tile_rows() * (w / (warps / dq_warps_m)), dq_tile_cols() * (w % (warps / dq_warps_m))};
  }
  // Tiled: K, V + double-buffered Q, dO + P and dS (block_m x block_n each) + double-buffered LSE and D
  // rows (fp32). Keys as rows: the same without P, with dS^T (block_n x block_m).
  constexpr int64_t smem_bytes() const {
    return (int64_t(2) * block_n * head_dim + int64_t(4) * block_m * head_dim +
            int64_t(tiled ? 2 : 1) * block_n * block_m) *
               kElemBytes +
           int64_t(4) * block_m * 4;
  }
};

// The tiled configuration of every bucket (the backward's first choice).
constexpr BwdTile bwd_tile(int bucket) {
  if (bucket <= 64) return BwdTile{bucket, 128, 128, 8, true, 2, 4, 4};
  if (bucket <= 96) return BwdTile{bucket, 128, 64, 8, true, 2, 4, 4};
  if (bucket <= 128) return BwdTile{bucket, 128, 64, 8, true, 2, 4, 2};
  if (bucket == 160 || bucket == 224) return BwdTile{bucket, 64, 64, 8, true, 4, 4, 4};
  return BwdTile{bucket, 64, 64, 8, true, 4, 2, 2};
}

// Buckets whose tiled kernel needs more shared memory than sm_80 gives; they also compile the
// keys-as-rows kernel (bwd_rows_tile).
constexpr bool has_rows_fallback(int bucket) { return bwd_tile(bucket).smem_bytes() > kSm80SmemBytes; }
constexpr BwdTile bwd_rows_tile(int bucket) { return BwdTile{bucket, 64, 32, 4}; }

// The configuration the backward runs on a device whose CTAs may opt into `smem_optin` bytes.
constexpr BwdTile bwd_tile_for(int bucket, int64_t smem_optin) {
  return bwd_tile(bucket).smem_bytes() <= smem_optin || !has_rows_fallback(bucket) ? bwd_tile(bucket)
                                                                                   : bwd_rows_tile(bucket);
}

// Deterministic dQ kernel: one CTA per (block_m queries, head, sequence) that loops over key tiles and
// accumulates dQ (16 x head_dim per warp) in registers, recomputing S, P, dP and dS. Warp w owns query
// rows [16 w, 16 w + 16) as in the forward. block_n shrinks with the head dim (64, 32 above 128, 16 above
// 192) so S + dP (block_n registers) fit beside the dQ accumulator (head_dim / 2).
struct DqTile {
  int head_dim;
  int block_m, block_n;
  int warps;

  constexpr int threads() const { return warps * 32; }
  // Q, dO + double-buffered K and V.
  constexpr int64_t smem_bytes() const {
    return (int64_t(2) * block_m * head_dim + int64_t(4) * block_n * head_dim) * kElemBytes;
  }
};

constexpr DqTile dq_tile(int bucket) { return DqTile{bucket, 64, bucket <= 128 ? 64 : bucket <= 192 ? 32 : 16, 4}; }

// What every configuration must satisfy for the kernels' index arithmetic (each is used by a static
// layout derivation in the kernels; see the comments there).
constexpr bool valid(FwdTile t) {
  return t.head_dim % 32 == 0 && t.block_m == t.warps * t.warp_rows() && t.block_n % 16 == 0 &&
         (t.m_frags == 1 || t.m_frags == 2) && t.smem_bytes() <= kSm80SmemBytes;
}
// Tiled: every warp grid divides the warps, every warp tile is a whole number of 16 x 16 MMA blocks in
// both dimensions (B operands are loaded as pairs of n8 fragments), and one thread per LSE / D value.
constexpr bool valid_tiled(BwdTile t) {
  const auto tiles = [&](int rows, int cols, int warps_rows) {
    return warps_rows > 0 && t.warps % warps_rows == 0 && rows % (16 * warps_rows) == 0 &&
           cols % (16 * (t.warps / warps_rows)) == 0;
  };
  return tiles(t.block_m, t.block_n, t.sdp_warps_m) && tiles(t.block_n, t.head_dim, t.dkv_warps_n) &&
         tiles(t.block_m, t.head_dim, t.dq_warps_m) && 2 * t.block_m <= t.threads();
}
// The tiled kernel may need sm_90's shared memory (has_rows_fallback); keys as rows fits sm_80.
constexpr bool valid(BwdTile t) {
  if (t.head_dim % 32 != 0 || t.smem_bytes() > (t.tiled ? kSm90SmemBytes : kSm80SmemBytes)) return false;
  if (t.tiled) return valid_tiled(t);
  return t.block_n == 16 * t.warps && t.block_m % 32 == 0 && t.warps % t.dq_row_groups() == 0 &&
         t.head_dim % t.dq_col_groups() == 0 && t.dq_cols_per_warp() % 16 == 0;
}
// exp_in_pv folds P into the row sums before dropout could zero it: the general instance must not use it.
constexpr bool valid(FwdKnobs k, bool general) { return !(general && k.exp_in_pv); }
constexpr bool valid(DqTile t) {
  return t.head_dim % 32 == 0 && t.block_m == 16 * t.warps && t.block_n % 16 == 0 && t.smem_bytes() <= kSm80SmemBytes;
}

constexpr bool all_tiles_valid() {
  for (int d : kHeadDimBuckets)
    if (!valid(fwd_tile(d, true)) || !valid(fwd_tile(d, false)) || !valid(fwd_tile(d, false, true)) ||
        !valid(bwd_tile(d)) || !bwd_tile(d).tiled || !valid(bwd_rows_tile(d)) || !valid(dq_tile(d)) ||
        !valid(fwd_knobs(d, true), true) || !valid(fwd_knobs(d, false), false))
      return false;
  return true;
}
static_assert(all_tiles_valid(), "an sm80 tile configuration breaks a kernel layout assumption");

}  // namespace flashattn::detail::cuda::sm80
