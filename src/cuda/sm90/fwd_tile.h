#pragma once

// The sm90 forward's tile per head-dim bucket, its shared-memory layout, and where the wgmma descriptors of
// each k-step start in it. Plain C++ with FA_HD functions: the kernel uses them, and
// tests/cpp/test_cuda_sm90.cpp checks on the host that the TMA boxes write what the descriptors read.
//
// Layout: a tile of `rows` rows x head dim is stored as 64-element column panels (128 bytes a row), panel
// after panel, each row's 16-byte chunk c at c ^ (row % 8): the layout TMA writes with the 128-byte swizzle
// when the box (64 elements, rows) of panel p lands at p * rows * 128 bytes from a 1024-byte aligned base,
// and the layout wgmma reads with a 128-byte-swizzle descriptor. It is sm80's SmemTile<rows, head dim>
// (cuda/sm80/smem_layout.h) for head dims that are multiples of 64, so the epilogue reuses its offsets.

#include <cstdint>
#include <numeric>

#include "common/host_device.h"

namespace flashattn::detail::cuda::sm90 {

inline constexpr uint32_t kPanelCols = 64;           // elements of a panel row: TMA's 128-byte swizzle span
inline constexpr uint32_t kPanelRowBytes = 128;      // 64 16-bit elements
inline constexpr uint32_t kSwizzleAtomBytes = 1024;  // 8 panel rows: the swizzle's repeat, wgmma's 8-row group
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kWgmmaRows = 64;               // wgmma's M: the rows of one consumer warpgroup
inline constexpr int kSmemOptinBytes = 227 * 1024;  // dynamic shared memory a CTA may opt into on sm_90

// Whether warpgroups at these setmaxnreg budgets fit the registers the CTA holds. setmaxnreg.inc takes
// registers only from those the CTA's own setmaxnreg.dec released, never more from the SM, so the pool is
// what the launch gave: per thread 64K / threads rounded down to the allocation unit of 8 (168 for 384
// threads, so 504 per lane of the three warpgroups, not 512). A split over that budget does not fail to
// launch: the consumers' setmaxnreg.inc waits for registers that never come, and the kernel hangs.
FA_HD constexpr bool setmaxnreg_fits(int warpgroups, int producer_regs, int consumer_regs) {
  const int threads = warpgroups * kWarpgroupThreads;
  const int launch_regs = (65536 / threads) / 8 * 8 < 255 ? (65536 / threads) / 8 * 8 : 255;
  return producer_regs + (warpgroups - 1) * consumer_regs <= warpgroups * launch_regs;
}

// One head-dim bucket's tile (sm90 fwd_tile below). Why these numbers: docs/kernels.md, "cuda_sm90 forward".
// The dynamic tile scheduler's ring (fwd_kernel.cuh, DynamicTiles): draw j uses slot j % kSchedSlots in
// that slot's phase (j / kSchedSlots) & 1, as tile j of pipeline.h's ring (tested against PipelineState).
inline constexpr int kSchedSlots = 2;
FA_HD constexpr uint32_t sched_slot(uint32_t draw) { return draw % uint32_t(kSchedSlots); }
FA_HD constexpr uint32_t sched_phase(uint32_t draw) { return (draw / uint32_t(kSchedSlots)) & 1u; }

struct Sm90FwdTile {
  int head_dim = 0;
  int block_m = 0;                           // query rows of a CTA: kWgmmaRows per consumer warpgroup
  int block_n = 0;                           // keys per K/V tile: the N of S = Q K^T
  int stages = 0;                            // K/V tiles in flight (ring of shared-memory stages)
  int producer_regs = 0, consumer_regs = 0;  // setmaxnreg of the producer and the consumer warpgroups

  FA_HD constexpr int consumer_warpgroups() const { return block_m / kWgmmaRows; }
  FA_HD constexpr int threads() const { return (1 + consumer_warpgroups()) * kWarpgroupThreads; }
  FA_HD constexpr int panels() const { return head_dim / int(kPanelCols); }
  FA_HD constexpr int q_bytes() const { return block_m * head_dim * 2; }
  FA_HD constexpr int kv_bytes() const { return block_n * head_dim * 2; }  // one K or V tile
  // Q, then the K stages, then the V stages (each a multiple of 1024 bytes), then O's staging tile where it
  // fits (else O is staged in Q's), then the mbarriers.
  FA_HD constexpr int k_offset(int stage) const { return q_bytes() + stage * kv_bytes(); }
  FA_HD constexpr int v_offset(int stage) const { return q_bytes() + (stages + stage) * kv_bytes(); }
  // q_full, then k_full, v_full and empty per stage, then v_edge and q_empty, then the dynamic tile
  // scheduler's sched_full and sched_empty per slot and its two slots' tile words (fwd_kernel.cuh), 8 bytes
  // each (the two words share one).
  FA_HD constexpr int barriers() const { return 3 + 3 * stages + 2 * kSchedSlots + 1; }
  // A tile of its own for O lets the next query tile's Q load while this one's O is stored (the persistent
  // grid, fwd_kernel.cuh); it is there when it fits in sm_90's 227 KB beside the rest.
  FA_HD constexpr bool o_separate() const {
    return 2 * q_bytes() + 2 * stages * kv_bytes() + barriers() * 8 + int(kSwizzleAtomBytes) <= kSmemOptinBytes;
  }
  FA_HD constexpr int o_offset() const { return o_separate() ? q_bytes() + 2 * stages * kv_bytes() : 0; }
  FA_HD constexpr int barrier_offset() const { return q_bytes() * (o_separate() ? 2 : 1) + 2 * stages * kv_bytes(); }
  // Dynamic shared memory to request: the above plus 1024 for aligning the base to the swizzle atom.
  FA_HD constexpr int smem_bytes() const { return barrier_offset() + barriers() * 8 + int(kSwizzleAtomBytes); }
  FA_HD constexpr bool registers_fit() const {
    return setmaxnreg_fits(1 + consumer_warpgroups(), producer_regs, consumer_regs);
  }
};

// The compiled buckets' tiles; head_dim 0 for a bucket without an sm90 kernel. `general`: the softcap/ALiBi
// instance, whose consumers need the score transform's state too. The register split (setmaxnreg) is the
// only difference: the producer gets 40 registers (the per-tile state of the persistent grid and the
// paged row copies of produce_paged_rows; it still keeps a word or two of that state in local memory,
// loaded once per work tile), which leaves the consumers 232 (3 x 128 threads share 504 a lane), enough for
// the plain instances; the general ones need 240 for their consumers, so their producers get 24 and keep
// more of that state in local memory.
FA_HD constexpr Sm90FwdTile fwd_tile(int bucket, bool general = false) {
  const int producer = general ? 24 : 40, consumer = general ? 240 : 232;
  // 128 x 128, two stages: S (64 x 128) and O (64 x 128) take 64 fp32 registers each per consumer
  // thread, P 32 more; Q + 2 x (K + V) + O's staging tile = 192 KB.
  if (bucket == 128) return Sm90FwdTile{128, 128, 128, 2, producer, consumer};
  // 128 x 128 as at D = 128 (FA3 runs 192 x 128 with three consumer warpgroups: a later step); the tiles
  // are half as large, so four stages fit (Q + 4 x (K + V) + O = 160 KB).
  if (bucket == 64) return Sm90FwdTile{64, 128, 128, 4, producer, consumer};
  // 128 x 112 (FA3's choice): O takes 96 registers a consumer thread, S 56 and P 28; Q 48 KB + 2 x (K + V)
  // of 42 KB = 216 KB (O is staged in Q's tile). Head dims 136-192 ran in the 256 bucket before, a third
  // of their products on zero columns.
  if (bucket == 192) return Sm90FwdTile{192, 128, 112, 2, producer, consumer};
  // 128 x 80 (FA3's choice): O alone takes 128 registers a consumer thread, S 40 and P 20; Q 64 KB +
  // 2 x (K + V) of 40 KB = 224 KB of sm_90's 227 (O is staged in Q's tile).
  if (bucket == 256) return Sm90FwdTile{256, 128, 80, 2, producer, consumer};
  return Sm90FwdTile{};
}

// Whether the instance of a bucket loops over work tiles (the persistent grid, fwd_kernel.cuh). Not the
// softcap/ALiBi instance at D = 256: its consumers hold O (128 registers), S, P and the score transform's
// state, and the tile loop's own live values do not fit beside them without spilling inside the key-tile
// loop. Not the 192 bucket either: with the tile loop its consumers keep per-tile state in local memory.
// Those keep one CTA per work tile.
FA_HD constexpr bool fwd_persistent(int bucket, bool general) { return bucket != 192 && !(general && bucket == 256); }

// The head-dim bucket a head dim runs in (0: none). Head dims below the bucket are zero-filled by TMA
// (the map's dim 0 is the real head dim) and never stored.
// Head dims of 32 and below stay with sm80: their box (64 elements) would be wider than the whole row.
// Head dims between 128 and 192 run in bucket 192, those between 192 and 256 in bucket 256.
FA_HD constexpr int fwd_bucket(int64_t head_dim) {
  if (head_dim > 192 && head_dim <= 256) return 256;
  if (head_dim > 128 && head_dim <= 192) return 192;
  return head_dim > 64 && head_dim <= 128 ? 128 : (head_dim > 32 && head_dim <= 64 ? 64 : 0);
}

// Paged K/V: a key tile is loaded as boxes of `paged_box_rows` rows, each from one page (the TMA box of a
// paged map spans rows of one block), so the box height divides both the page and the tile: their greatest
// common divisor. Boxes land at row offsets that are multiples of it, which must be multiples of 8 (the
// swizzle atom: a box written there has the swizzle phase of the whole tile's layout). 0 where no such box
// exists (a page size that is not a multiple of 8, or none): cuda_sm80 runs those calls. Host only: the
// kernel reads the result from its arguments.
constexpr int paged_box_rows(int64_t page_size, int block_n) {
  if (page_size <= 0 || block_n <= 0) return 0;
  const int64_t box = std::gcd(page_size, int64_t(block_n));
  return box % 8 == 0 ? int(box) : 0;
}

// Paged K/V whose pages are shorter than a key tile (fwd_kernel.cuh, produce_paged_rows): the producer
// warpgroup's 128 threads copy a K or V tile in 16-byte chunks with cp.async. Thread `tid` takes chunks
// tid % 2 + 2 j of rows tid / 2 + 64 pass: each instruction reads whole 32-byte sectors (a row's two lanes,
// adjacent chunks), and the 32 lanes of a warp (16 rows x 2 chunks) write each 16-byte bank group four
// times, the least 512 bytes allow; a thread looks up two rows' pages per tile.
inline constexpr int kRowCopyThreadsPerRow = 2;
inline constexpr int kRowCopyRowStep = kWarpgroupThreads / kRowCopyThreadsPerRow;
FA_HD constexpr int row_copy_passes(int block_n) { return (block_n + kRowCopyRowStep - 1) / kRowCopyRowStep; }
FA_HD constexpr int row_copy_row(int tid, int pass) { return tid / kRowCopyThreadsPerRow + pass * kRowCopyRowStep; }
FA_HD constexpr int row_copy_chunk(int tid, int j) { return tid % kRowCopyThreadsPerRow + kRowCopyThreadsPerRow * j; }
// Byte offset of copy (pass, j) of thread tid in a tile of `rows` rows, tile_byte_offset of its row and
// chunk, as a per-thread base (row tid / 2 and its chunk swizzled with the row's phase, the same phase in
// every pass since the row step is a multiple of 8) and per-copy constants: chunk tid % 2 + 2 j lies in
// panel j / 4 at in-panel chunk (tid % 2) | 2 (j % 4), so its swizzled position is the base's XOR 2 (j % 4).
FA_HD constexpr uint32_t row_copy_base(int tid) {
  const int row = tid / kRowCopyThreadsPerRow, chunk = tid % kRowCopyThreadsPerRow;
  return uint32_t(row) * kPanelRowBytes + (uint32_t(chunk ^ (row % 8)) * 16u);
}
FA_HD constexpr uint32_t row_copy_offset(uint32_t thread_base, int rows, int pass, int j) {
  return (thread_base ^ (uint32_t(j % 4) * 32u)) + uint32_t(j / 4) * uint32_t(rows) * kPanelRowBytes +
         uint32_t(pass * kRowCopyRowStep) * kPanelRowBytes;
}

// Byte offset of byte `byte` (< 128) of panel row `row` from its panel's base: 128 bytes a row, 16-byte chunk c
// at c ^ (row % 8) (the 128-byte swizzle; any element size, e4m3 rows of the FP8 forward included).
FA_HD constexpr uint32_t swizzled_row_byte(int row, int byte) {
  return uint32_t(row) * kPanelRowBytes + ((uint32_t(byte / 16) ^ uint32_t(row % 8)) * 16u) + uint32_t(byte % 16);
}

// Byte offset of element (row, col) in a tile of `rows` rows (the layout above).
FA_HD constexpr uint32_t tile_byte_offset(int rows, int row, int col) {
  return uint32_t(col / int(kPanelCols)) * uint32_t(rows) * kPanelRowBytes +
         swizzled_row_byte(row, (col % int(kPanelCols)) * 2);
}

// Descriptor start (bytes from the tile's base) of k-step kk (16 elements of K) for a K-major operand whose
// rows start at `row0` (a multiple of 8): Q and K in S = Q K^T, K being the head dim. The k-step lies in
// panel kk / 4, 32 bytes further per k-step inside the panel row; the leading byte offset is unused (16)
// and the stride byte offset (one 8-row group to the next) is kSwizzleAtomBytes.
FA_HD constexpr uint32_t kmajor_start(int rows, int row0, int kk) {
  return uint32_t(kk / 4) * uint32_t(rows) * kPanelRowBytes + uint32_t(row0) * kPanelRowBytes + uint32_t(kk % 4) * 32;
}

// Descriptor start of k-step kk for an MN-major operand (V in O += P V: K = keys along the tile's rows,
// N = head dim along its columns): rows 16 kk ..; the leading byte offset is the panel stride
// (mn_major_leading: from one 64-element group of N to the next), the stride byte offset kSwizzleAtomBytes
// (one 8-row group of K to the next).
FA_HD constexpr uint32_t mnmajor_start(int kk) { return uint32_t(kk) * 16 * kPanelRowBytes; }
FA_HD constexpr uint32_t mnmajor_leading(int rows) { return uint32_t(rows) * kPanelRowBytes; }

}  // namespace flashattn::detail::cuda::sm90
