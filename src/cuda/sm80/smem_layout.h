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

// Ldsm with the tile base folded in, for a base aligned to a panel row (16 kPanelChunks bytes; the kernels'
// tiles start at multiples of 512 bytes of 128-byte aligned shared memory): base + row_bytes then has no
// bits below the panel row, so adding x_bytes is an OR and the address of even chunk A of a panel is
// at ^ 16 A with at = base + row_bytes + x_bytes. One register per tile and lane; an ldmatrix at
// compile-time (r0, c0) costs at most one XOR (shared by every load of that A) plus an immediate.
// Why `at` is hidden behind an empty asm: otherwise the compiler folds row_bytes and x_bytes back into
// their uses inside the K/V loop (the PTX recomputes them from %tid.x there), and at 255 registers ptxas
// then re-read threadIdx.x every iteration: two S2R and ~30 integer instructions per K/V tile in the
// D = 96 forward ahead of its first ldmatrix (3.4% of its stall samples on the S2R's consumer alone).
// `first_row` (a multiple of 16, so the swizzle is unchanged) offsets every row. kPinned = false keeps
// Ldsm's form exactly (base, first_row and lane parts combined at each use, which the compiler may
// recompute inside a loop); the instance whose register budget that suits chooses it (fwd_mainloop.cuh).
template <typename Tile, LanePattern kPattern, bool kPinned = true>
struct LdsmAt {
  Ldsm<Tile, kPattern> lane_parts;
  uint32_t base;
  int first_row;
  uint32_t at;

  FA_HD LdsmAt(uint32_t tile_base, int lane, int first_row_ = 0)
      : lane_parts(lane), base(tile_base), first_row(first_row_) {
    at = base + uint32_t(first_row * Tile::kPanelChunks * 16) + lane_parts.row_bytes + lane_parts.x_bytes;
#if defined(__CUDA_ARCH__)
    if constexpr (kPinned) asm volatile("" : "+r"(at));
#endif
  }

  // As Ldsm::addr at row first_row + r0; r0 a multiple of 8 and c0 of 16, both compile-time after unrolling.
  FA_HD uint32_t addr(int r0, int c0) const {
    if constexpr (!kPinned) {
      return lane_parts.addr(base, first_row + r0, c0);
    } else {
      const int chunk = c0 >> 3;
      return (at ^ uint32_t((chunk % Tile::kPanelChunks) * 16)) +
             uint32_t((chunk / Tile::kPanelChunks) * Tile::kPanelElems + r0 * Tile::kPanelChunks * 8) * 2u;
    }
  }
};

template <typename Tile>
using LdsmRows16 = Ldsm<Tile, LanePattern::kRows16>;
template <typename Tile>
using LdsmRows8x2 = Ldsm<Tile, LanePattern::kRows8x2>;

}  // namespace flashattn::detail::cuda::sm80
