#pragma once

// XOR-swizzled shared-memory layout of a (kRows x kCols) tile of 16-bit elements, kCols a multiple of 32.
// Plain C++ with FA_HD functions, so tests check the layout's properties on the host.
//
// A row is cut into 16-byte chunks (8 elements): ldmatrix and cp.async move whole chunks. The tile is
// stored as column panels of kPanelChunks chunks (64 elements = one 128-byte line when kCols is a
// multiple of 64, else 32 elements = 64 bytes), panel after panel; inside a panel, rows follow each
// other and the chunk index is XORed with a function of the row:
//   128-byte panel rows: chunk ^= row % 8          64-byte panel rows: chunk ^= (row / 2) % 4
// Why: shared memory has 32 banks of 4 bytes, i.e. 8 bank groups of 16 bytes. One 8x8 ldmatrix reads the
// same logical chunk of 8 consecutive rows (starting at a multiple of 8); the swizzle puts those 8 chunks
// in 8 different bank groups, so every ldmatrix phase is conflict-free:
//   128-byte rows: group = chunk ^ (row % 8), a permutation of 0..7 over the 8 rows;
//   64-byte rows:  group = 4 * (row % 2) + (chunk ^ ((row / 2) % 4)): rows of equal parity differ in
//                  the XOR term, rows of different parity in the 4 * (row % 2) term.
// tests/cpp/test_cuda_sm80.cpp checks both claims and that the layout is a bijection.

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::detail::cuda::sm80 {

template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kChunksPerRow = kCols / 8;
  static constexpr int kPanelChunks = kCols % 64 == 0 ? 8 : 4;
  static constexpr int kPanelElems = kRows * kPanelChunks * 8;
  static constexpr int kElems = kRows * kCols;
  static_assert(kCols % 32 == 0, "tile columns must be a multiple of 32 elements (whole 64-byte panels)");
  static_assert(kRows % 8 == 0, "tile rows must be a multiple of 8 (whole ldmatrix matrices)");

  FA_HD static constexpr int swizzle(int row) { return kPanelChunks == 8 ? (row & 7) : ((row >> 1) & 3); }

  // Element offset of the first element of chunk `chunk` (0 .. kChunksPerRow - 1) of row `row`.
  FA_HD static constexpr int chunk_offset(int row, int chunk) {
    return (chunk / kPanelChunks) * kPanelElems + row * (kPanelChunks * 8) +
           (((chunk % kPanelChunks) ^ swizzle(row)) * 8);
  }

  // Element offset of (row, col); col may be anywhere inside its chunk.
  FA_HD static constexpr int offset(int row, int col) { return chunk_offset(row, col >> 3) + (col & 7); }
};

// Lane part of ldmatrix row addresses. An x4 ldmatrix at tile rows r0.. and columns c0.. (r0 a
// multiple of 8, c0 a multiple of 16) has lane l address row r0 + r(l), chunk c0 / 8 + h(l), in one of
// two lane patterns:
//   kRows16:  r(l) = l % 16,                  h(l) = l / 16        (load_a, load_b_kn)
//   kRows8x2: r(l) = l % 8 + 8 (l / 16),      h(l) = (l / 8) % 2   (load_b_nk, load_a_trans)
// With the swizzle above, swizzle(r0 + r) = swizzle(r) when r0 % 8 == 0, and the chunk in
// its panel is A + h with A = (c0 / 8) % kPanelChunks even, so (A + h) ^ swizzle = A ^ (h ^ swizzle(r)):
//   byte address = base + 16 (r kPanelChunks) + (16 A ^ 16 x) + 2 (panel kPanelElems + r0 8 kPanelChunks)
// with x = h ^ swizzle(r) per lane. Only `row_bytes` and `x_bytes` live in registers; with r0 and c0
// compile-time constants after unrolling the rest folds into immediates, and a runtime c0 costs one XOR.
enum class LanePattern { kRows16, kRows8x2 };

template <typename Tile, LanePattern kPattern>
struct Ldsm {
  uint32_t row_bytes;  // 16 * r(l) * kPanelChunks: the lane's row inside a panel
  uint32_t x_bytes;    // 16 * (h(l) ^ swizzle(r(l)))

  FA_HD explicit Ldsm(int lane) {
    const int r = kPattern == LanePattern::kRows16 ? (lane & 15) : ((lane & 7) + ((lane >> 4) << 3));
    const int h = kPattern == LanePattern::kRows16 ? (lane >> 4) : ((lane >> 3) & 1);
    row_bytes = uint32_t(r * Tile::kPanelChunks * 16);
    x_bytes = uint32_t((h ^ Tile::swizzle(r)) * 16);
  }

  // Byte address (shared window) of this lane's row chunk for an ldmatrix at (r0, c0) of the tile at `base`.
  FA_HD uint32_t addr(uint32_t base, int r0, int c0) const {
    const int chunk = c0 >> 3;
    return base + row_bytes + (uint32_t((chunk % Tile::kPanelChunks) * 16) ^ x_bytes) +
           uint32_t((chunk / Tile::kPanelChunks) * Tile::kPanelElems + r0 * Tile::kPanelChunks * 8) * 2u;
  }
};

template <typename Tile>
using LdsmRows16 = Ldsm<Tile, LanePattern::kRows16>;
template <typename Tile>
using LdsmRows8x2 = Ldsm<Tile, LanePattern::kRows8x2>;

}  // namespace flashattn::detail::cuda::sm80
