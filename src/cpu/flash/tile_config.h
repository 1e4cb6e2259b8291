#pragma once

// Tile sizes of the cpu_flash backend, in one place, with the reasons for them.

#include <cstdint>

#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// Register block of the micro-kernel (microkernel.h): kMicroRows rows x kMicroStrips strips of 16 columns
// = 24 fp32 accumulators of the 32 zmm registers, leaving room for the 3 B vectors and a broadcast. Per
// k step it issues 24 FMAs (12 cycles on two FMA ports) against 11 loads (3 vectors + 8 broadcasts, under
// 6 cycles on two load ports), so it is bound by the FMAs, not by the loads. 8 rows also divide 16, so a row
// block never straddles a strip, which the transposed-A layout relies on; a head dim that is not a multiple
// of 8 ends in a partial row block (the kernel table has every row count from 1 to kMicroRows).
// With AVX2 a 16-lane vector is two of the 16 ymm registers: 4 rows x 1 strip = 8 accumulators, 2 B
// registers and a broadcast (8 FMAs against 6 loads per k step); the AVX-512 block would need 48.
#if defined(FLASH_AVX2)
constexpr int kMicroRows = 4;
constexpr int kMicroStrips = 1;
#else
constexpr int kMicroRows = 8;
constexpr int kMicroStrips = 3;
#endif

// Rows of one (sequence, kv head) up to which forward uses the decode path (attend_decode.cpp) instead
// of tiles: the tiled GEMMs put query rows in vector lanes, so fewer rows than a strip would leave most
// lanes idle, while the decode path vectorises over head dim and keys and reads K/V once for all rows.
constexpr int64_t kDecodeMaxRows = 8;
// Kv heads of one sequence that a decode pass sweeps together, key block by key block: in the usual
// (seqlen, heads_k, head_dim) layouts their rows of one key are adjacent, so the pass reads K and V
// sequentially instead of one head_dim-long row every heads_k * head_dim elements.
constexpr int64_t kDecodeMaxHeads = 16;
// Keys per online-softmax step of the decode path (attend_decode.cpp): the scores of a block, for every
// head and row of the pass, are computed before its softmax and its P V, so that those two phases each
// stream K or V front to back. 64 to 512 measured the same (the rescale of the accumulators and the
// phase changes are rare either way); the block's scores take heads x rows x kDecodeBlock floats.
constexpr int64_t kDecodeBlock = 256;
// Keys per split of split-KV decode: enough work per split that the merge is negligible.
constexpr int64_t kDecodeMinSplitKeys = 512;
constexpr int64_t kDecodeMaxSplits = 64;

struct TileShape {
  int64_t q_rows;  // query rows per tile (GEMM N of S^T = K Q^T): a multiple of 16 * kMicroStrips
  int64_t k_rows;  // keys per tile (GEMM M of S^T, GEMM K of O^T = V^T P^T)
};

// Forward tiles. Keys: 64 per tile, so that the S^T tile of a strip (64 x 16 x 4 B = 4 KiB) and the
// micro-kernel's B panels stay in L1 between the S^T GEMM, the softmax and the O^T GEMM.
// Query rows: every tile converts the whole K/V of its head to fp32 once (from L3 or memory, rows
// heads_k * head_dim apart), so wider tiles divide that traffic; they cost no extra work under causal or
// window masks since strips outside a K tile's band skip its GEMMs. The widest candidate wins whose
// fp32 working set (Q^T + O^T + S^T) stays within ~768 KiB of the 2 MiB L2, and that still leaves at
// least kTilesPerThread tiles per thread for the dynamic schedule to balance.
constexpr int64_t kForwardKeyRows = 64;
constexpr int64_t kForwardQueryRows[] = {384, 192, 96, 48};
constexpr int64_t kForwardTileBytes = 768 * 1024;
constexpr int64_t kTilesPerThread = 4;
// The widest query tile (bounds per-strip arrays on the stack).
constexpr int64_t kMaxStrips = kForwardQueryRows[0] / kLanes;

constexpr bool forward_tile_fits(int64_t head_dim, int64_t q_rows) {
  return (2 * head_dim + kForwardKeyRows) * q_rows * int64_t(sizeof(float)) <= kForwardTileBytes;
}

// Backward tiles: a pair (query block, K/V tile) runs five GEMMs whose shortest dimension is the block's
// rows (the K of dV += P^T dO and dK += dS^T Q): 96 rows (two column blocks of the micro-kernel) halve
// the per-call accumulator loads and stores of 48 rows, measured ~8% faster; 192 gained nothing more.
// S^T and dP^T (64 x 96 x 4 B = 24 KiB each) stay in L1/L2 between the GEMMs of the pair.
constexpr TileShape backward_tiles() { return {96, 64}; }

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
constexpr int64_t strips_of(int64_t columns) { return (columns + kLanes - 1) / kLanes; }

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
