#pragma once

// Warp-level operand loads of the m16n8k16 MMA from swizzled shared-memory tiles (smem_layout.h), and
// the register-only conversion of an fp32 accumulator into an A operand. Each loader derives, from the
// fragment layouts written at the top of cuda/common/ptx.h, which row address lane l hands to
// ldmatrix.x4 (lanes 8i..8i+7 address the 8 rows of matrix i; register i receives matrix i). Tile
// coordinates passed in are multiples of 16 (rows) and 16 (columns), so the 8 rows of every 8x8 matrix
// start at a multiple of 8, which is what the swizzle needs to be conflict-free.

#include <cstdint>

#include "cuda/common/ptx.h"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::detail::cuda::sm80 {

// A operand = tile[r0 .. r0+15][c0 .. c0+15] of a row-major [m][k] tile.
//   a0 = rows r0+0..7, cols c0+0..7     (matrix 0: lanes 0-7)
//   a1 = rows r0+8..15, cols c0+0..7    (matrix 1: lanes 8-15)
//   a2 = rows r0+0..7, cols c0+8..15    (matrix 2: lanes 16-23)
//   a3 = rows r0+8..15, cols c0+8..15   (matrix 3: lanes 24-31)
// so lane l addresses row r0 + l % 16, column c0 + 8 * (l / 16) (kRows16); no transpose (a0 = A[g][2t..]).
template <typename Tile>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t base, const LdsmRows16<Tile>& L, int r0, int c0) {
  ptx::ldmatrix_x4(a, L.addr(base, r0, c0));
}

// The same from a lane address with the tile base folded in (LdsmAt, smem_layout.h).
template <typename Tile, bool kPinned>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const LdsmAt<Tile, LanePattern::kRows16, kPinned>& L, int r0,
                                       int c0) {
  ptx::ldmatrix_x4(a, L.addr(r0, c0));
}

// A operand = (tile^T)[m0 .. m0+15][k0 .. k0+15] of a row-major [k][m] tile (A[m][k] = tile[k][m]).
//   a0 = A[g][2t..] = tile[k0+2t..][m0+g]:     stored rows k0+0..7,  cols m0+0..7   (lanes 0-7)
//   a1 = A[g+8][2t..]:                         stored rows k0+0..7,  cols m0+8..15  (lanes 8-15)
//   a2 = A[g][2t+8..]:                         stored rows k0+8..15, cols m0+0..7   (lanes 16-23)
//   a3 = A[g+8][2t+8..]:                       stored rows k0+8..15, cols m0+8..15  (lanes 24-31)
// i.e. row k0 + l % 8 + 8 (l / 16), column m0 + 8 ((l / 8) % 2) (kRows8x2), each read transposed
// (.trans gives lane l the elements [2t][g] and [2t+1][g] of the stored matrix).
template <typename Tile>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], uint32_t base, const LdsmRows8x2<Tile>& L, int m0,
                                             int k0) {
  ptx::ldmatrix_x4_trans(a, L.addr(base, k0, m0));
}

// B operands of the two n8 fragments n0..n0+7 (b[0], b[1]) and n0+8..n0+15 (b[2], b[3]) over k0..k0+15,
// from a row-major [n][k] tile (B[k][n] = tile[n][k], e.g. K for S = Q K^T).
//   b0 of fragment 0 = B[2t..][g] = tile[n0+g][k0+2t..]: stored rows n0+0..7, cols k0+0..7   (lanes 0-7)
//   b1 of fragment 0 = B[2t+8..][g]:                      rows n0+0..7,  cols k0+8..15       (lanes 8-15)
//   b0 of fragment 1:                                     rows n0+8..15, cols k0+0..7        (lanes 16-23)
//   b1 of fragment 1:                                     rows n0+8..15, cols k0+8..15       (lanes 24-31)
// i.e. kRows8x2; no transpose: lane l of matrix i holds stored [l/4][2(l%4)..], which is [g][2t..].
template <typename Tile>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], uint32_t base, const LdsmRows8x2<Tile>& L, int n0, int k0) {
  ptx::ldmatrix_x4(b, L.addr(base, n0, k0));
}

// The same from a lane address with the tile base folded in (LdsmAt, smem_layout.h).
template <typename Tile, bool kPinned>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const LdsmAt<Tile, LanePattern::kRows8x2, kPinned>& L,
                                          int n0, int k0) {
  ptx::ldmatrix_x4(b, L.addr(n0, k0));
}

// B operands of the two n8 fragments n0..n0+7 (b[0], b[1]) and n0+8..n0+15 (b[2], b[3]) over k0..k0+15,
// from a row-major [k][n] tile (B = tile, e.g. V for O += P V).
//   b0 of fragment 0 = B[2t..][g] = tile[k0+2t..][n0+g]: stored rows k0+0..7, cols n0+0..7  (lanes 0-7)
//   b1 of fragment 0 = B[2t+8..][g]:                      rows k0+8..15, cols n0+0..7        (lanes 8-15)
//   b0 of fragment 1:                                     rows k0+0..7,  cols n0+8..15       (lanes 16-23)
//   b1 of fragment 1:                                     rows k0+8..15, cols n0+8..15       (lanes 24-31)
// i.e. kRows16, each read transposed: lane l receives stored [2t][g] and [2t+1][g].
template <typename Tile>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], uint32_t base, const LdsmRows16<Tile>& L, int k0, int n0) {
  ptx::ldmatrix_x4_trans(b, L.addr(base, k0, n0));
}

// The same from a lane address with the tile base folded in (LdsmAt, smem_layout.h).
template <typename Tile, bool kPinned>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const LdsmAt<Tile, LanePattern::kRows16, kPinned>& L,
                                          int k0, int n0) {
  ptx::ldmatrix_x4_trans(b, L.addr(k0, n0));
}

// The A operand of k-slice kk (columns 16 kk .. 16 kk + 15) of a 16-row fp32 accumulator held as n8
// fragments c[j][0..3] (c0, c1 = row g, cols 8j+2t, +1; c2, c3 = row g+8): the accumulator layout of two
// adjacent n8 fragments is exactly the A layout of one k16 slice,
//   a0 = A[g][2t..] = c[2kk][0, 1]    a1 = A[g+8][2t..] = c[2kk][2, 3]
//   a2 = A[g][2t+8..] = c[2kk+1][0, 1]  a3 = A[g+8][2t+8..] = c[2kk+1][2, 3]
// so P (and dS) feed the next product straight from registers, rounded to T.
template <typename T, int kFrags>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[kFrags][4], int kk) {
  a[0] = ptx::pack2<T>(c[2 * kk][0], c[2 * kk][1]);
  a[1] = ptx::pack2<T>(c[2 * kk][2], c[2 * kk][3]);
  a[2] = ptx::pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = ptx::pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// d += a * (b[0], b[1]) and d2 += a * (b[2], b[3]): the two n8 fragments of one x4 B load.
template <typename T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]};
  const uint32_t b1[2] = {b[2], b[3]};
  ptx::mma_16816<T>(d0, a, b0);
  ptx::mma_16816<T>(d1, a, b1);
}

// Stores the 16 x (8 kFrags) accumulator c (rows r0 + g, r0 + g + 8; scaled by row_scale[0] and [1]) to a
// tile as T, two elements (4 bytes) per store. Conflict-free: the 8 rows g of one store instruction hit 8
// different 16-byte bank groups (swizzle) and the 4 lanes t of a row the 4 words of one group.
template <typename T, typename Tile, int kFrags>
__device__ __forceinline__ void store_acc(T* tile, const float (&c)[kFrags][4], int r0, int c0,
                                          const float (&row_scale)[2], int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < kFrags; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = r0 + g + 8 * half, col = c0 + 8 * j + 2 * t;
      *reinterpret_cast<uint32_t*>(tile + Tile::offset(row, col)) =
          ptx::pack2<T>(c[j][2 * half] * row_scale[half], c[j][2 * half + 1] * row_scale[half]);
    }
}

}  // namespace flashattn::detail::cuda::sm80
