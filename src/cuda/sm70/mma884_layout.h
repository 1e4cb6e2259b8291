#pragma once

// Where each lane's operands and accumulators of Volta's mma.sync.m8n8k4 (f16 inputs, f32 accumulate) lie
// in the 16 x 16 warp tile the sm70 kernels build from it. Plain C++ (FA_HD): the kernels call these, and
// tests/cpp/test_cuda_sm70_layout.cpp runs a host model of the instruction (the PTX ISA's per-lane
// fragment tables) through them against a plain matrix product.
//
// One m8n8k4 issue by a warp is four independent 8 x 8 x 4 products, one per quadpair: quadpair q
// (lanes 4q..4q+3, the "low group", and 4q+16..4q+19, the "high group") multiplies its own A (8 x 4) and
// B (4 x 8) into its own C (8 x 8). The sm70 kernels give the four quadpairs the four 8 x 8 quadrants of
// a 16 x 16 tile: quadpair q computes rows 8 (q % 2) .. + 7 and columns 8 (q / 2) .. + 7, so one issue is
// a 16 x 16 x 4 product of the warp whose A rows are shared by the quadpairs of equal q % 2 and whose B
// columns by those of equal q / 2.
//
// Per lane, in its quadpair's 8 x 8 quadrant (PTX ISA, "Matrix Fragments for mma.m8n8k4 with .f16"):
//   A, row-major:  a0..a3 = row (lane % 4) + 4 hi, columns (k) 0..3              (one 8-byte load)
//   B, col-major:  b0..b3 = column (lane % 4) + 4 hi, rows (k) 0..3               (S = Q K^T: a K row)
//   B, row-major:  b0..b3 = row (k) lane % 4, columns 0..3 + 4 hi                  (O = P V: a V row)
//   C, f32:        c_i = row (lane & 1) + (i & 2) + 4 hi, column (i & 4) + (lane & 2) + (i & 1)
// with hi = lane / 16. A lane's eight accumulators thus lie on two rows of the tile (i & 2 = 0 and 2),
// four columns each; the other lanes holding the same row differ in lane bits 1 and 3 (the column pair
// and the quadrant column), so row reductions are two xor-shuffles, 2 and 8.

#include "common/host_device.h"

namespace flashattn::detail::cuda::sm70 {

// The quadrant of lane's quadpair in the 16 x 16 tile.
FA_HD int quad_row(int lane) { return 8 * ((lane >> 2) & 1); }
FA_HD int quad_col(int lane) { return 8 * ((lane >> 3) & 1); }
FA_HD int high_group(int lane) { return lane >> 4; }

// The tile row whose 4 consecutive k values lane holds in a row-major A operand.
FA_HD int a_row(int lane) { return quad_row(lane) + (lane & 3) + 4 * high_group(lane); }
// The tile column whose 4 consecutive k values lane holds in a col-major B operand.
FA_HD int b_col(int lane) { return quad_col(lane) + (lane & 3) + 4 * high_group(lane); }
// Row-major B: the k row lane holds, and the first of its 4 consecutive columns.
FA_HD int b_row_k(int lane) { return lane & 3; }
FA_HD int b_row_col0(int lane) { return quad_col(lane) + 4 * high_group(lane); }

// Accumulator i (0..7) of lane: its row and column in the 16 x 16 tile.
FA_HD int c_row(int lane, int i) { return quad_row(lane) + (lane & 1) + (i & 2) + 4 * high_group(lane); }
FA_HD int c_col(int lane, int i) { return quad_col(lane) + (i & 4) + (lane & 2) + (i & 1); }

// The xor-shuffle masks that visit the four lanes holding one accumulator row.
inline constexpr int kRowShuffle1 = 2;
inline constexpr int kRowShuffle2 = 8;

}  // namespace flashattn::detail::cuda::sm70
