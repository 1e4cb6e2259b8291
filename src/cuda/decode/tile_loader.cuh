#pragma once

// Global -> shared copies of the decode kernel: the block's packed query rows once, then K/V tiles of
// kBlockN keys through a multi-stage cp.async pipeline. Every copy is 16 bytes (8 elements) and the 16
// (head dim 128) consecutive threads of one row read one contiguous 256-byte row: coalesced. Chunks past
// the head dim, keys outside the block's visible range and rows past the packed rows are zero-filled
// (a zero-size cp.async), so the tensor-core math never meets uninitialised shared memory.
//
// Shared layout of every tile (Q, K, V): row-major, kHeadDim elements per row, 16-byte chunk c of row r
// stored at chunk c ^ (r % 8). ldmatrix reads one chunk from each of 8 consecutive rows; rows are a
// multiple of 128 bytes apart, so without the XOR all 8 would hit the same 4 banks.

#include <cstdint>

#include "api/problem.h"
#include "common/kvcache.h"
#include "cuda/common/ptx.h"
#include "cuda/decode/cache_rows.h"
#include "cuda/decode/decode_tile.h"

namespace flashattn::detail::cuda::decode {

// Element offset of (row, first element of chunk) in a swizzled tile.
template <int kHeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
}

// Element offset of (row, first element of chunk) in a tile of kTileRows rows of the kernel's Tile: the
// layout above, or for the warpgroup shape (Tile::kWgmma) 64-element panels, panel p holding chunks
// 8p..8p+7 of every row, 128 bytes a row, with the same XOR inside the panel: the 128-byte swizzled
// layout that wgmma reads (cuda/common/wgmma.cuh). At head dim 64 both are the same.
template <typename Tile, int kTileRows>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  if constexpr (Tile::kWgmma) {
    return (chunk >> 3) * (kTileRows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
  } else {
    return swizzled<Tile::kHeadDim>(row, chunk);
  }
}

// Issues the copies of the block's packed query rows [m0, m0 + kRows) into q_smem (no commit).
// Row r of the tile is query token i = (m0 + r) / group of head hk * group + (m0 + r) % group.
template <typename Tile, typename T>
__device__ __forceinline__ void load_q_tile(const KVCacheProblem& p, const DecodeArgs& a, int64_t b, int64_t hk, int m0,
                                            T* q_smem) {
  const T* q = static_cast<const T*>(p.q.ptr);
  const int chunks = int(p.head_dim / 8);
  for (int idx = threadIdx.x; idx < Tile::kRows * Tile::kChunks; idx += Tile::kThreads) {
    const int r = idx / Tile::kChunks, c = idx % Tile::kChunks;
    const int mr = m0 + r;
    const bool valid = mr < a.rows && c < chunks;
    const T* src = q;
    if (valid) src = q + p.q.offset(b, mr / a.group, hk * a.group + mr % a.group) + 8 * c;
    ptx::cp_async_16(ptx::smem_addr(q_smem + tile_offset<Tile, Tile::kRows>(r, c)), src, valid);
  }
}

// A hint that pulls the L1 line holding `p` in ahead of its use (no register, no wait). `p` must point
// into a valid allocation. (Kept here rather than in cuda/common/ptx.h, which this backend does not own.)
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }

// The rows thread t copies in a K/V tile: chunk c = t % kCacheChunks of rows t / kCacheChunks + pass *
// kRowsPerPass (16-byte chunks of the cache's rows: 8 elements of a 16-bit cache, 16 of an FP8 one).
template <typename Tile>
struct TileRows {
  static constexpr int kRowsPerPass = Tile::kThreads / Tile::kCacheChunks;
  static constexpr int kPasses = Tile::kBlockN / kRowsPerPass;
};

// A paged cache's block-table entries of the rows of one tile. The kernel reads them one tile before
// the tile's copies (fetch_page_entries while the previous tile's math runs), so that the copies never
// wait on the table.
//
// With compact paging (cache_rows.h) each lane reads one key: the warp's threads copy kWarpKeys distinct
// keys (kRowsPerWarpPass per pass), so lane j < kWarpKeys divides, reads and turns into a byte offset the
// key of slot j = pass * kRowsPerWarpPass + row, and the copying threads take the offsets by shuffles.
// Otherwise every thread reads the entries of all its rows (the kCacheChunks threads of a row read the same
// entry), keeping the rows' positions in their pages except with more than 8 rows per thread (head dim
// 256 in the 4-warp shape), where 16 more live registers spilled: there the copies divide again. Per
// tile and thread (D = 128, 4 warps, SASS): the per-row way ~100 instructions for the entries and ~290
// for the copies (~145 with one offset for K and V), the shuffled way ~20 and ~150, the contiguous
// loader ~150; with one block per SM a warp alone on its scheduler issues all of them between its tiles
// (bench/NOTES.md).
template <typename Tile>
struct PageEntries {
  static constexpr int kRowsPerWarpPass = 32 / Tile::kCacheChunks;
  static constexpr int kWarpKeys = TileRows<Tile>::kPasses * kRowsPerWarpPass;
  static_assert(32 % Tile::kCacheChunks == 0 && kWarpKeys <= 32, "a warp's keys of one tile fit its lanes");
  static constexpr bool kKeepInPage = TileRows<Tile>::kPasses <= 8;
  // Per row: its page (block-table entry) and its position in the page. With compact paging only [0]
  // is used, for this lane's key slot, and in_page[0] holds the position times row_bytes.
  int32_t block[TileRows<Tile>::kPasses];
  uint32_t in_page[kKeepInPage ? TileRows<Tile>::kPasses : 1];
};

// Issues the reads of the block-table entries of tile `tile` into e (paged caches only; independent
// loads, consumed by load_kv_tile one iteration later). Keys outside [kv_begin, kv_end) read nothing
// (past the sequence an entry may be garbage) and count as entry 0; their rows are zero-filled by the
// copies. A few threads also prefetch into L1 the table lines of the tile after this one, so that its
// reads hit (a 128-byte line holds 32 entries: 8 tiles of 64 keys at page size 16, half a tile at page
// size 1).
template <typename Tile>
__device__ __forceinline__ void fetch_page_entries(const CacheRows& rows, int leftpad, int tile, int kv_begin,
                                                   int kv_end, PageEntries<Tile>& e) {
  using R = TileRows<Tile>;
  using E = PageEntries<Tile>;
  if (rows.compact_paging) {
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int slot = lane % E::kWarpKeys;
    const int key = tile * Tile::kBlockN + warp * E::kRowsPerWarpPass + slot % E::kRowsPerWarpPass +
                    (slot / E::kRowsPerWarpPass) * R::kRowsPerPass;
    uint32_t index, in_page;
    rows.page.divmod(uint32_t(leftpad + key), &index, &in_page);
    e.block[0] = key >= kv_begin && key < kv_end ? clamp_page(rows.table[index], rows.last_page) : 0;
    e.in_page[0] = in_page * uint32_t(rows.row_bytes);
  } else {
    const int first_key = tile * Tile::kBlockN + int(threadIdx.x) / Tile::kCacheChunks;
#pragma unroll
    for (int pass = 0; pass < R::kPasses; ++pass) {
      const int key = first_key + pass * R::kRowsPerPass;
      uint32_t index, in_page;
      rows.page.divmod(uint32_t(leftpad + key), &index, &in_page);
      if constexpr (E::kKeepInPage) e.in_page[pass] = in_page;
      e.block[pass] = key >= kv_begin && key < kv_end ? clamp_page(rows.table[index], rows.last_page) : 0;
    }
  }
  if (threadIdx.x < 3) {
    // Entries of the next tile's first key, 32 entries (one line) later, and its last key, each clamped
    // to the visible keys: every line of the next tile's entries, and no entry past the sequence.
    const int next_first = (tile + 1) * Tile::kBlockN > kv_begin ? (tile + 1) * Tile::kBlockN : kv_begin;
    const int next_last = (tile + 2) * Tile::kBlockN - 1 < kv_end - 1 ? (tile + 2) * Tile::kBlockN - 1 : kv_end - 1;
    if (next_first <= next_last) {
      const uint32_t first_page = rows.page_index(leftpad + next_first);
      const uint32_t last_page = rows.page_index(leftpad + next_last);
      const uint32_t page = first_page + 32u * threadIdx.x < last_page ? first_page + 32u * threadIdx.x : last_page;
      prefetch_l1(rows.table + page);
    }
  }
}

// Issues the copies of K/V tile `tile` (keys [tile * kBlockN, +kBlockN) of the sequence's attended keys,
// at cache positions leftpad + key) into k_smem/v_smem (no commit). Only keys in [kv_begin, kv_end) are
// read; the others (outside every row's window, or past the sequence) are zero-filled. `e` holds the
// tile's page entries (fetch_page_entries) for a paged cache and is ignored otherwise. C is the cache's
// element type: T, copied into tile_offset's layout, or uint8_t (FP8), copied row-major into a ring stage
// (kHeadDim bytes a row) for convert_kv_tile.
//
// A contiguous cache holds the rows of one (sequence, kv head) at a fixed stride: a pass adds a
// constant to the source pointers. Computing each row's address from its position instead (64-bit
// multiplies, the paged test) cost ~90 instructions per pass (SASS); without it the kernel issues half
// the instructions at batch 64 x 32k (Nsight Compute, bench/NOTES.md). A paged row adds its
// page and row offsets (its division by the page size was done with its entry read) to per-thread base
// pointers that already hold the head and chunk offsets; with compact paging (cache_rows.h) the lane of
// the row's slot computed its byte offset, the same for K and V, and two shuffles bring it over.
template <typename Tile, bool kPaged, typename C>
__device__ __forceinline__ void load_kv_tile(const KVCacheProblem& p, const CacheRows& rows, int leftpad, int tile,
                                             int kv_begin, int kv_end, const PageEntries<Tile>& e, C* k_smem,
                                             C* v_smem) {
  static_assert(sizeof(C) == size_t(Tile::kCacheElemBytes), "the cache's element type");
  using R = TileRows<Tile>;
  constexpr int kChunkElems = 16 / int(sizeof(C));
  const C* k = static_cast<const C*>(p.cache.k);
  const C* v = static_cast<const C*>(p.cache.v);
  const int c = threadIdx.x % Tile::kCacheChunks;
  const bool chunk_valid = c < int(p.head_dim / kChunkElems);
  const int row0 = int(threadIdx.x) / Tile::kCacheChunks;
  const int first_key = tile * Tile::kBlockN + row0;
  const uint32_t k_base = ptx::smem_addr(k_smem), v_base = ptx::smem_addr(v_smem);
  // Byte offset of this thread's chunk in pass `pass`'s row (a constant step where kRowsPerPass is a
  // multiple of the swizzle period, 8).
  auto dst = [&](int pass) {
    if constexpr (Tile::kFp8Cache) return uint32_t((row0 + pass * R::kRowsPerPass) * Tile::kHeadDim + 16 * c);
    return uint32_t(tile_offset<Tile, Tile::kBlockN>(row0 + pass * R::kRowsPerPass, c) * int(sizeof(C)));
  };
  // Every key of the tile visible: no per-row test (all tiles but the first and last of a range).
  const bool interior = tile * Tile::kBlockN >= kv_begin && (tile + 1) * Tile::kBlockN <= kv_end;

  if constexpr (!kPaged) {
    const int64_t pos = int64_t(leftpad) + first_key;
    const C* k_src = k + rows.k_head + kChunkElems * c + rows.k_contiguous_row(pos);
    const C* v_src = v + rows.v_head + kChunkElems * c + rows.v_contiguous_row(pos);
    const int64_t k_step = int64_t(R::kRowsPerPass) * rows.k_row_stride;
    const int64_t v_step = int64_t(R::kRowsPerPass) * rows.v_row_stride;
#pragma unroll
    for (int pass = 0; pass < R::kPasses; ++pass) {
      const int key = first_key + pass * R::kRowsPerPass;
      // A zero-filling copy reads nothing; it still gets the cache's own base address as its source.
      const bool valid = chunk_valid && (interior || (key >= kv_begin && key < kv_end));
      ptx::cp_async_16(k_base + dst(pass), valid ? k_src : k, valid);
      ptx::cp_async_16(v_base + dst(pass), valid ? v_src : v, valid);
      k_src += k_step;
      v_src += v_step;
    }
    return;
  }

  using E = PageEntries<Tile>;
  if (rows.compact_paging) {
    // This lane's slot offset (its entry has arrived by now), then each row's from the lane of its slot.
    const uint64_t mine = rows.compact_row_bytes(e.block[0], e.in_page[0]);
    const uint32_t lo = uint32_t(mine), hi = uint32_t(mine >> 32);
    const int row_in_warp = int(threadIdx.x) % 32 / Tile::kCacheChunks;
    // Every source address is valid without a select: a key outside the range has entry 0 and a row
    // inside page 0, and a chunk past the head dim reads from the row's start (neither copies a byte).
    const char* k_row = reinterpret_cast<const char*>(chunk_valid ? k + rows.k_head + kChunkElems * c : k);
    const char* v_row = reinterpret_cast<const char*>(chunk_valid ? v + rows.v_head + kChunkElems * c : v);
#pragma unroll
    for (int pass = 0; pass < R::kPasses; ++pass) {
      const int key = first_key + pass * R::kRowsPerPass;
      const bool valid = chunk_valid && (interior || (key >= kv_begin && key < kv_end));
      const int slot = pass * E::kRowsPerWarpPass + row_in_warp;
      const uint64_t offset = uint64_t(__shfl_sync(0xffffffffu, hi, slot)) << 32 | __shfl_sync(0xffffffffu, lo, slot);
      ptx::cp_async_16(k_base + dst(pass), k_row + offset, valid);
      ptx::cp_async_16(v_base + dst(pass), v_row + offset, valid);
    }
    return;
  }
  auto in_page = [&](int pass) {
    if constexpr (E::kKeepInPage) {
      return e.in_page[pass];
    } else {
      uint32_t index, position;
      rows.page.divmod(uint32_t(leftpad + first_key + pass * R::kRowsPerPass), &index, &position);
      return position;
    }
  };
  const C* k_chunk = k + rows.k_head + kChunkElems * c;
  const C* v_chunk = v + rows.v_head + kChunkElems * c;
#pragma unroll
  for (int pass = 0; pass < R::kPasses; ++pass) {
    const int key = first_key + pass * R::kRowsPerPass;
    const bool valid = chunk_valid && (interior || (key >= kv_begin && key < kv_end));
    const C* k_src = k_chunk + rows.k_paged_row(e.block[pass], in_page(pass));
    const C* v_src = v_chunk + rows.v_paged_row(e.block[pass], in_page(pass));
    ptx::cp_async_16(k_base + dst(pass), valid ? k_src : k, valid);
    ptx::cp_async_16(v_base + dst(pass), valid ? v_src : v, valid);
  }
}

}  // namespace flashattn::detail::cuda::decode
