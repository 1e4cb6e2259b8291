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
#include "cuda/decode/decode_tile.h"

namespace flashattn::detail::cuda::decode {

// Element offset of (row, first element of chunk) in a swizzled tile.
template <int kHeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
}

// Element offsets of key position `pos` of kv head hk in the K and V caches. The same address as
// common/kvcache.h's cache_offset, with the page split done by a FastDivmod instead of a 64-bit division
// (this runs for every key row of every tile).
struct CacheRows {
  int64_t k_batch_stride, v_batch_stride;  // paged: stride between blocks
  int64_t k_row_stride, v_row_stride;
  int64_t k_head, v_head;  // hk * head stride
  int64_t k_seq, v_seq;    // contiguous: cache_row * batch stride
  const int32_t* table;    // paged: this sequence's row of block_table, else nullptr
  FastDivmod page;

  __device__ __forceinline__ void offsets(int pos, int64_t* k_off, int64_t* v_off) const {
    if (table != nullptr) {
      uint32_t page_index, in_page;
      page.divmod(uint32_t(pos), &page_index, &in_page);
      const int64_t block = table[page_index];
      *k_off = block * k_batch_stride + int64_t(in_page) * k_row_stride + k_head;
      *v_off = block * v_batch_stride + int64_t(in_page) * v_row_stride + v_head;
    } else {
      *k_off = k_seq + int64_t(pos) * k_row_stride + k_head;
      *v_off = v_seq + int64_t(pos) * v_row_stride + v_head;
    }
  }
};

__device__ __forceinline__ CacheRows make_cache_rows(const KVCacheProblem& p, const CacheSeq& s, int64_t b, int64_t hk,
                                                     const FastDivmod& page) {
  CacheRows c;
  c.k_batch_stride = p.cache.k_batch_stride;
  c.v_batch_stride = p.cache.v_batch_stride;
  c.k_row_stride = p.cache.k_row_stride;
  c.v_row_stride = p.cache.v_row_stride;
  c.k_head = hk * p.cache.k_head_stride;
  c.v_head = hk * p.cache.v_head_stride;
  c.k_seq = s.cache_row * p.cache.k_batch_stride;
  c.v_seq = s.cache_row * p.cache.v_batch_stride;
  c.table = p.cache.block_table ? p.cache.block_table + b * p.cache.block_table_stride : nullptr;
  c.page = page;
  return c;
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
    ptx::cp_async_16(ptx::smem_addr(q_smem + swizzled<Tile::kHeadDim>(r, c)), src, valid);
  }
}

// Issues the copies of K/V tile `tile` (keys [tile * kBlockN, +kBlockN) of the sequence's attended keys,
// at cache positions leftpad + key) into k_smem/v_smem (no commit). Only keys in [kv_begin, kv_end) are
// read; the others (outside every row's window, or past the sequence, where a page table entry may be
// garbage) are zero-filled.
//
// Thread t copies chunk t % kChunks of rows t / kChunks + pass * (kThreads / kChunks).
template <typename Tile, typename T>
__device__ __forceinline__ void load_kv_tile(const KVCacheProblem& p, const CacheRows& rows, int leftpad, int tile,
                                             int kv_begin, int kv_end, T* k_smem, T* v_smem) {
  constexpr int kRowsPerPass = Tile::kThreads / Tile::kChunks;
  const T* k = static_cast<const T*>(p.cache.k);
  const T* v = static_cast<const T*>(p.cache.v);
  const int c = threadIdx.x % Tile::kChunks;
  const bool chunk_valid = c < int(p.head_dim / 8);
#pragma unroll
  for (int pass = 0; pass < Tile::kBlockN / kRowsPerPass; ++pass) {
    const int r = threadIdx.x / Tile::kChunks + pass * kRowsPerPass;
    const int key = tile * Tile::kBlockN + r;
    const bool row_valid = key >= kv_begin && key < kv_end;
    int64_t k_off = 0, v_off = 0;
    if (row_valid) rows.offsets(leftpad + key, &k_off, &v_off);
    // A zero-filling copy reads nothing; it still gets the cache's own base address as its source.
    const bool valid = row_valid && chunk_valid;
    const int dst = swizzled<Tile::kHeadDim>(r, c);
    ptx::cp_async_16(ptx::smem_addr(k_smem + dst), valid ? k + k_off + 8 * c : k, valid);
    ptx::cp_async_16(ptx::smem_addr(v_smem + dst), valid ? v + v_off + 8 * c : v, valid);
  }
}

}  // namespace flashattn::detail::cuda::decode
