#pragma once

// Register and shared-memory layout facts of the native FP8 (e4m3) forward on sm_90 (issue 32; the kernel is
// fp8_fwd_kernel.cuh). Plain C++ with FA_HD functions, so that tests/cpp/test_cuda_sm90.cpp checks them on the
// host against the PTX ISA's fragment tables.
//
// P V with 8-bit operands is wgmma m64nNk32 with A = P from registers. The A fragment of an 8-bit k32 step
// gives thread (g = lane / 4, t = lane % 4) of a warp, for rows g (registers a0, a2) and g + 8 (a1, a3), the k
// indices 4t .. 4t + 3 (a0, a1) and 16 + 4t .. 16 + 4t + 3 (a2, a3), one byte each. The fp32 accumulator of
// S = Q K^T gives the same thread, of each n8 column group j, columns 8j + 2t and 8j + 2t + 1 (elements 0, 1 for
// row g; 2, 3 for row g + 8). The sets differ, and shuffling P into A's places costs a byte permute and a
// shuffle per register (the usual FP8 FlashAttention recipe). Instead the keys are relabelled: the sum over
// keys in P V does not care about their order, so A's k index k of a 32-key step may stand for any key of that
// step as long as V^T's column k (the B operand, K-major as 8-bit wgmma requires) holds the same key. With
// fp8_pv_key below, every byte of a thread's A registers is one of its own S values, and P is packed with one
// 4-wide conversion per register; the transpose that writes V^T into shared memory (which 8-bit B needs
// anyway) applies the same relabelling.

#include <cstdint>

#include "common/host_device.h"
#include "cuda/sm90/fwd_tile.h"

namespace flashattn::detail::cuda::sm90 {

// The key (0..31, within a 32-key step) that A's k index k (0..31) stands for: inside each 16-key half,
// k = 4t + j is key 2t + j for j < 2 and 8 + 2t + (j - 2) for j >= 2 (the thread's columns 2t, 2t + 1 of the
// half's first and second n8 group).
FA_HD constexpr int fp8_pv_key(int k) {
  const int half = k / 16, t = (k % 16) / 4, j = k % 4;
  return 16 * half + (j < 2 ? 2 * t + j : 8 + 2 * t + (j - 2));
}

// Where byte i (0..3) of A register r (0..3) of a 32-key step comes from in the thread's S accumulator of that
// step (n8 groups 0..3 of the step): the group and the element (0..3) of acc[group][element].
struct Fp8PackSource {
  int group = 0, element = 0;
};
FA_HD constexpr Fp8PackSource fp8_pack_source(int r, int i) {
  // a0 / a1: the first half (groups 0, 1), rows g / g + 8 (elements 0, 1 / 2, 3); a2 / a3: the second half.
  return Fp8PackSource{2 * (r / 2) + i / 2, 2 * (r % 2) + i % 2};
}

// The V transpose's split of a 128 x 128 stage among warps (fp8_fwd_kernel.cuh). V^T is written in blocks of
// 4 head-dim rows x 4 key columns, from four 32-bit loads of V (head dims d0 .. d0 + 3 of four key rows) and
// four 32-bit stores (one a V^T row). In pass `pass` (0..31) of a warp, lane (a = lane / 4, b = lane % 4)
// takes head dims d0 = 4 lane and columns c0 = 16 (a ^ pass / 4) + 4 (b ^ pass % 4): over the 32 passes each
// lane meets every column block once. Both sides are free of bank conflicts in the 128-byte swizzle
// (swizzled_row_byte): a load reads chunk (a ^ key % 8) word b of its key row, where key % 8 depends on b and
// the pass only; a store writes chunk (a ^ pass / 4 ^ (4 b + row) % 8) word (b ^ pass % 4) of row 4 lane + row.
// (With one column block for the whole warp, the stores' 32 rows 4 lane + row fell in two chunks: 16-way.)
struct Fp8TransposeBlock {
  int d0 = 0, c0 = 0;
};
inline constexpr int kFp8TransposePasses = 32;  // column blocks of a 128-key stage
FA_HD constexpr Fp8TransposeBlock fp8_transpose_block(int lane, int pass) {
  const int a = lane / 4, b = lane % 4;
  return Fp8TransposeBlock{4 * lane, 16 * (a ^ (pass / 4)) + 4 * (b ^ (pass % 4))};
}

// One head-dim bucket's FP8 tile: 128 query rows (two consumer warpgroups), block_n keys per stage; a stage
// holds K (K-major, block_n rows of head_dim bytes), V as TMA lands it (block_n rows) and V^T (head_dim rows of
// block_n bytes, the relabelled transpose). One 128-byte swizzle row of 8-bit elements is 128 elements, so a
// head dim of 128 is one panel and 256 two.
struct Sm90Fp8FwdTile {
  int head_dim = 0, block_m = 0, block_n = 0, stages = 0;
  FA_HD constexpr int q_bytes() const { return block_m * head_dim; }
  FA_HD constexpr int kv_bytes() const { return block_n * head_dim; }  // each of K, V and V^T
  FA_HD constexpr int stage_bytes() const { return 3 * kv_bytes(); }
  // Q, then per stage K, V and V^T (each a multiple of 1024 bytes), then the barriers.
  FA_HD constexpr int k_offset(int stage) const { return q_bytes() + stage * stage_bytes(); }
  FA_HD constexpr int v_offset(int stage) const { return k_offset(stage) + kv_bytes(); }
  FA_HD constexpr int vt_offset(int stage) const { return k_offset(stage) + 2 * kv_bytes(); }
  FA_HD constexpr int barrier_offset() const { return q_bytes() + stages * stage_bytes(); }
  // q_full, then k_full, v_full, vt_full and empty per stage, and one spare: 8 bytes each.
  FA_HD constexpr int barriers() const { return 2 + 4 * stages; }
  // The epilogue stores O (bf16) from registers, so no staging tile.
  FA_HD constexpr int smem_bytes() const { return barrier_offset() + barriers() * 8 + int(kSwizzleAtomBytes); }
};

inline constexpr int kFp8TileRows = 128;  // query rows of every FP8 tile (two consumer warpgroups)

// The FP8 tiles: 128 x 128 with four stages at D = 128 (208 KB) and two at D = 256 (224 KB); the other head
// dims are not planned yet (D = 64 needs the 64-byte swizzle for its 64-byte rows).
FA_HD constexpr Sm90Fp8FwdTile fp8_fwd_tile(int bucket) {
  if (bucket == 128) return Sm90Fp8FwdTile{128, 128, 128, 4};
  if (bucket == 256) return Sm90Fp8FwdTile{256, 128, 128, 2};
  return Sm90Fp8FwdTile{};
}

// P in e4m3: exp2(s - max) lies in [0, 2^slack] (slack: the lazy max's, whole base-2 units), and is stored
// times 2^(8 - slack), a power of two (exact), so that the largest P is 256 (e4m3 holds up to 448) and small
// probabilities keep e4m3's normal range (down to 2^-6) as long as they can; the output divides the factor out
// with the row sum. A slack above 8 would overflow e4m3: the FP8 kernel's slack is at most 8.
FA_HD constexpr float fp8_p_scale(int slack) {
  float f = 1.0f;
  for (int e = slack < 8 ? slack : 8; e < 8; ++e) f *= 2.0f;
  return f;
}

}  // namespace flashattn::detail::cuda::sm90
