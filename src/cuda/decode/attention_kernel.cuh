#pragma once

// The split-KV decode attention kernel (flash-decoding with GQA packing; decode_tile.h has the shapes).
//
// Block = (sequence b, kv head hk, split, row tile); blockIdx.x = ((b * Hk + hk) * splits + split) *
// row_tiles + row_tile, so the row tiles of one split, which read the same K/V, run side by side and the
// second reads from L2. The block's key range is the union of its rows' visible keys, cut into tiles of
// kBlockN keys; split s takes a contiguous run of ceil(tiles / splits) tiles. With one split the block
// writes out and LSE; otherwise it writes its normalised partial output and LSE to the workspace, and
// combine.cu's kernel, launched early (programmatic dependent launch), merges the splits.
//
// Pipeline (S = Tile::kStages buffers, cp.async groups): the prologue issues Q + tile 0 as group 0 and
// tiles 1..S-2 as groups 1..S-2 (a group is committed even when empty, so group g is always tile g).
// Iteration it waits until at most S - 2 groups are pending, i.e. groups 0..it (tile it) are complete
// for this thread; the barrier then makes every thread's copies visible and guarantees that all warps
// finished iteration it - 1, whose buffer (it - 1) % S = (it + S - 1) % S is refilled with tile
// it + S - 1 before the math of tile it starts. An FP8 cache (Tile::kFp8Cache): the buffers hold e4m3
// bytes; after the refill is issued the block converts buffer it % S into the one 16-bit work tile
// (fp8_tile.cuh) and a second barrier orders that before the math. The work tile is free then: the first
// barrier follows every warp's math of tile it - 1. The descale factors of (b, hk) scale the logits (k's)
// and the output (v's): both products are linear in them.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "api/problem.h"
#include "common/kvcache.h"
#include "common/score.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ptx.h"
#include "cuda/decode/decode_tile.h"
#include "cuda/decode/fp8_tile.cuh"
#include "cuda/decode/tile_loader.cuh"
#include "cuda/decode/warp_attention.cuh"
#include "cuda/decode/warpgroup_attention.cuh"

namespace flashattn::detail::cuda::decode {

// Merges the key warps of every row staged in shared memory and writes the block's rows: out (storage
// dtype) and LSE with one split, else the partial output and LSE of this split. A row with no visible
// key has m = -inf and l = 0 in every key warp: out 0 and LSE +inf (-inf as a partial, which the
// combine weighs 0). Thread idx handles 4 dims (d = 4 (idx % (D / 4))) of row idx / (D / 4): the
// writes of consecutive threads are contiguous.
template <typename Tile, typename T>
__device__ __forceinline__ void write_block_rows(const KVCacheProblem& p, const DecodeArgs& a, int64_t b, int64_t hk,
                                                 int split, int m0, const float* o_stage, const float* m_stage,
                                                 const float* l_stage, float out_factor) {
  const int d4 = int(p.head_dim / 4);
  for (int idx = threadIdx.x; idx < Tile::kRows * d4; idx += Tile::kThreads) {
    const int r = idx / d4, d = 4 * (idx % d4);
    const int mr = m0 + r;
    if (mr >= a.rows) break;  // r grows with idx: every later idx is a padding row too
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < Tile::kKeyWarps; ++w) m_max = fmaxf(m_max, m_stage[w * Tile::kRows + r]);
    const bool empty = m_max == -INFINITY;
    float l = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!empty) {
#pragma unroll
      for (int w = 0; w < Tile::kKeyWarps; ++w) {
        const int row = w * Tile::kRows + r;
        const float scale = ptx::exp2_approx(m_stage[row] - m_max);  // 0 for a key warp that saw nothing
        l += scale * l_stage[row];
        const float4 v = *reinterpret_cast<const float4*>(o_stage + row * Tile::kOStride + d);
        acc.x += scale * v.x;
        acc.y += scale * v.y;
        acc.z += scale * v.z;
        acc.w += scale * v.w;
      }
    }
    // l >= 1 when the row saw a key: its maximal logit contributes 2^0 in the warp holding m_max.
    const float inv = empty ? 0.0f : out_factor / l;
    const float lse_empty = a.num_splits == 1 ? INFINITY : -INFINITY;
    const float lse = empty ? lse_empty : (m_max + log2f(l)) * kLn2;
    if (a.num_splits == 1) {
      const int64_t i = mr / a.group, h = hk * a.group + mr % a.group;
      T* out = static_cast<T*>(p.out.ptr) + p.out.offset(b, i, h) + d;
      uint2 packed;
      packed.x = ptx::pack2<T>(acc.x * inv, acc.y * inv);
      packed.y = ptx::pack2<T>(acc.z * inv, acc.w * inv);
      *reinterpret_cast<uint2*>(out) = packed;  // 8-byte aligned: rows are 16-byte aligned, d % 4 == 0
      if (d == 0 && p.lse.ptr != nullptr) p.lse.ptr[p.lse.offset(b, i, h)] = lse;
    } else {
      const int64_t row = ((int64_t(split) * p.batch + b) * p.heads_k + hk) * a.rows + mr;
      *reinterpret_cast<float4*>(a.part_out + row * p.head_dim + d) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (d == 0) a.part_lse[row] = lse;
    }
  }
}

// kPaged: the cache is paged (p.cache.block_table set). Separate instances keep each loop to its own
// loader: with the paged paths in the same loop, the D = 64 contiguous row of the decode bench ran 10%
// slower than before them; separated, 4% (bench/NOTES.md).
template <typename T, typename Tile, bool kPaged>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocksPerSm)
    decode_attention_kernel(const KVCacheProblem p, const DecodeArgs a) {
  static_assert(sizeof(T) == 2, "tensor-core path: 16-bit q, out (and K/V tiles in shared memory) only");
  using C = std::conditional_t<Tile::kFp8Cache, uint8_t, T>;  // the cache's element type
  // 1024-byte aligned: the warpgroup shape's Q, K and V tiles (multiples of 1 KB, decode_tile.h) then
  // start on the 128-byte swizzle's 8-row atoms, which wgmma locates from the address bits
  // (cuda/common/wgmma.cuh).
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr int stages = Tile::kStages;
  T* q_smem = reinterpret_cast<T*>(smem);
  C* k_smem = reinterpret_cast<C*>(q_smem + Tile::kQElems);  // the ring: stages of K, then of V
  C* v_smem = k_smem + stages * Tile::kTileElems;
  // FP8: the 16-bit tiles the math reads (else the ring's stages themselves).
  T* k_work = reinterpret_cast<T*>(v_smem + stages * Tile::kTileElems);
  T* v_work = k_work + Tile::kTileElems;

  int64_t bid = blockIdx.x;
  const int row_tile = int(bid % a.row_tiles);
  bid /= a.row_tiles;
  const int split = int(bid % a.num_splits);
  bid /= a.num_splits;
  const int64_t hk = bid % p.heads_k;
  const int64_t b = bid / p.heads_k;

  const CacheSeq seq = cache_seq(p, b);
  const Mask mask = make_mask(p.score, p.seqlen_q, seq.seqlen_k);
  const int m0 = row_tile * Tile::kRows;
  const int64_t i_first = m0 / a.group;
  const int64_t i_last = ((m0 + Tile::kRows < a.rows ? m0 + Tile::kRows : a.rows) - 1) / a.group;
  // key_begin and key_end are non-decreasing in the query: the keys some row of the block sees are
  // [key_begin(i_first), key_end(i_last)); those all of them see are [key_begin(i_last), key_end(i_first)).
  const int kv_begin = int(mask.key_begin(i_first));
  const int kv_end = int(mask.key_end(i_last));
  const int all_begin = int(mask.key_begin(i_last));
  const int all_end = int(mask.key_end(i_first));
  int tile_lo = 0, tile_hi = 0;
  if (kv_end > kv_begin) {
    const int first = kv_begin / Tile::kBlockN;
    const int last = (kv_end + Tile::kBlockN - 1) / Tile::kBlockN;
    const int per_split = (last - first + a.num_splits - 1) / a.num_splits;
    tile_lo = first + split * per_split;
    tile_hi = tile_lo + per_split < last ? tile_lo + per_split : last;
  }

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int rw = warp % Tile::kRowWarps, kw = warp / Tile::kRowWarps;

  const CacheRows cache_rows = make_cache_rows(p, seq, b, hk, a.page);
  const int leftpad = int(seq.leftpad);
  // A paged cache's entries of the next tile to copy (tile_loader.cuh: read one tile ahead).
  PageEntries<Tile> entries;
  if (a.wait_for_inputs) pdl_wait();
  if (kPaged && tile_lo < tile_hi) fetch_page_entries<Tile>(cache_rows, leftpad, tile_lo, kv_begin, kv_end, entries);
  load_q_tile<Tile>(p, a, b, hk, m0, q_smem);
#pragma unroll
  for (int s = 0; s < stages - 1; ++s) {
    if (tile_lo + s < tile_hi)
      load_kv_tile<Tile, kPaged>(p, cache_rows, leftpad, tile_lo + s, kv_begin, kv_end, entries,
                                 k_smem + s * Tile::kTileElems, v_smem + s * Tile::kTileElems);
    ptx::cp_async_commit();
    if (kPaged && tile_lo + s + 1 < tile_hi)
      fetch_page_entries<Tile>(cache_rows, leftpad, tile_lo + s + 1, kv_begin, kv_end, entries);
  }

  // The two rows of this thread (warp_attention.cuh); padding rows past a.rows act as the last row.
  // FP8 descale factors (1 without: the products are then the same bits).
  const float k_factor = p.k_descale.at(b, hk), v_factor = p.v_descale.at(b, hk);
  RowSlots rs;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int local = rw * 16 + (lane >> 2) + 8 * k;
    const int mr = m0 + local < a.rows ? m0 + local : a.rows - 1;
    const int64_t i = mr / a.group, h = hk * a.group + mr % a.group;
    rs.key_begin[k] = int(mask.key_begin(i));
    rs.key_end[k] = int(mask.key_end(i));
    rs.diagonal[k] = int(mask.diagonal(i));
    rs.mod[k] = ScoreMod<float>{p.score.softmax_scale * k_factor, p.score.softcap, alibi_slope(p.score, b, h)};
  }
  rs.scale_log2 = a.scale_log2 * k_factor;
  WarpState<Tile> st;
  st.clear();

  // Buffers of tile it (read) and of tile it + S - 1 (refilled), i.e. it % S and (it + S - 1) % S.
  int read_buf = 0, fill_buf = stages - 1;
  for (int tile = tile_lo; tile < tile_hi; ++tile) {
    ptx::cp_async_wait<stages - 2>();
    if constexpr (Tile::kWgmma) wgmma::fence_proxy_async();  // the copies are read by wgmma (async proxy)
    __syncthreads();
    const int ahead = tile + stages - 1;
    if (ahead < tile_hi)
      load_kv_tile<Tile, kPaged>(p, cache_rows, leftpad, ahead, kv_begin, kv_end, entries,
                                 k_smem + fill_buf * Tile::kTileElems, v_smem + fill_buf * Tile::kTileElems);
    ptx::cp_async_commit();
    // The entries of the tile copied next iteration: their loads are in flight during this tile's math.
    if (kPaged && ahead + 1 < tile_hi)
      fetch_page_entries<Tile>(cache_rows, leftpad, ahead + 1, kv_begin, kv_end, entries);
    const int n0 = tile * Tile::kBlockN;
    const bool full = n0 >= all_begin && n0 + Tile::kBlockN <= all_end;
    const T* k_tile;
    const T* v_tile;
    if constexpr (Tile::kFp8Cache) {
      convert_kv_tile<Tile, T>(k_smem + read_buf * Tile::kTileElems, v_smem + read_buf * Tile::kTileElems, k_work,
                               v_work);
      if constexpr (Tile::kWgmma) wgmma::fence_proxy_async();  // generic-proxy stores read by wgmma
      __syncthreads();
      k_tile = k_work;
      v_tile = v_work;
    } else {
      k_tile = k_smem + read_buf * Tile::kTileElems;
      v_tile = v_smem + read_buf * Tile::kTileElems;
    }
    if constexpr (Tile::kWgmma)
      attend_tile_wgmma<Tile, T>(q_smem, k_tile, v_tile, n0, full, rs, a, lane, st);
    else
      attend_tile<Tile, T>(q_smem, k_tile, v_tile, n0, full, rs, a, rw, kw, lane, st);
    fill_buf = read_buf;  // (it + S) % S: the buffer just read is the next one refilled
    read_buf = read_buf + 1 == stages ? 0 : read_buf + 1;
  }

  // The combine kernel may launch once every block is here (it waits for this grid to complete before it
  // reads the partials): its launch then overlaps the epilogue instead of following it.
  pdl_launch_dependents();
  // The append kernel, when this one was launched early behind it, has completed from here on: the call's
  // kernels complete in stream order.
  pdl_wait();
  // Epilogue: the staging area overlays Q and K/V, so wait for every copy and every warp's last reads.
  ptx::cp_async_wait<0>();
  __syncthreads();
  float* o_stage = reinterpret_cast<float*>(smem);
  float* m_stage = o_stage + Tile::kKeyWarps * Tile::kRows * Tile::kOStride;
  float* l_stage = m_stage + Tile::kKeyWarps * Tile::kRows;
  stage_warp_state<Tile>(st, rw, kw, lane, o_stage, m_stage, l_stage);
  __syncthreads();
  write_block_rows<Tile, T>(p, a, b, hk, split, m0, o_stage, m_stage, l_stage, v_factor);
}

}  // namespace flashattn::detail::cuda::decode
