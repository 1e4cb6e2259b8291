#pragma once

// The warpgroup shape's share of one K/V tile (decode_tile.h, RowShape::warpgroup; sm_90a): the block's
// four warps are one warpgroup holding 64 packed rows, warp w rows 16w..16w+15. S = Q K^T is one chain of
// wgmma m64n64k16 over the head dim with Q and K read from shared memory; the softmax is the warp-level
// one of warp_attention.cuh (wgmma's accumulators are laid out as the mma.m16n8 fragments it takes);
// O += P V is a chain of wgmma m64n(head dim)k16 with P from registers and V from shared memory. Tiles
// are in tile_offset's panel layout: K-major for Q and K, MN-major (transposed B) for V.

#include <cstdint>

#include "cuda/common/ptx.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/decode/decode_tile.h"
#include "cuda/decode/warp_attention.cuh"

namespace flashattn::detail::cuda::decode {

// Attends the warpgroup's 64 rows to the tile whose first key is n0 (every warp of the block calls it,
// converged). `full`: every row of the block sees every key of the tile.
template <typename Tile, typename T>
__device__ __forceinline__ void attend_tile_wgmma(const T* q_smem, const T* k_tile, const T* v_tile, int n0, bool full,
                                                  const RowSlots& rs, const DecodeArgs& a, int lane,
                                                  WarpState<Tile>& st) {
  static_assert(Tile::kWgmma && Tile::kRows == 64 && Tile::kBlockN == 64, "one warpgroup, 64 rows, 64 keys");
  constexpr int kD = Tile::kHeadDim;
  constexpr uint32_t kPanelRowBytes = 128;               // 64 16-bit elements
  constexpr uint32_t kPanelBytes = 64 * kPanelRowBytes;  // a panel of a 64-row tile
  constexpr uint32_t kAtomBytes = 8 * kPanelRowBytes;    // 8 rows: the swizzle atom

  float s[Tile::kBlockN / 8][4];
#pragma unroll
  for (int j = 0; j < Tile::kBlockN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;

  // S = Q K^T: k-step kk reads dims 16kk..16kk+15, 32 bytes into the rows of panel kk / 4.
  const uint32_t q_base = ptx::smem_addr(q_smem), k_base = ptx::smem_addr(k_tile), v_base = ptx::smem_addr(v_tile);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t offset = (kk / 4) * kPanelBytes + (kk % 4) * 32;
    wgmma::mma_ss_m64n64k16<T>(s, wgmma::smem_desc(q_base + offset, 16, kAtomBytes),
                               wgmma::smem_desc(k_base + offset, 16, kAtomBytes));
  }
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operands(s);

  softmax_tile<Tile>(s, n0, full, rs, a, lane, st);

  // O += P V: k-step kk takes keys 16kk..16kk+15 (rows 16kk.. of V, 2048 bytes further each); N runs over
  // the head dim's panels, kPanelBytes apart. P is packed before the fence that orders it (and the
  // softmax's rescale of O) before the wgmma reads.
  uint32_t pa[Tile::kBlockN / 16][4];
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 16; ++kk) {
    pa[kk][0] = ptx::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = ptx::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = ptx::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = ptx::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 16; ++kk)
    wgmma::mma_rs_m64k16_tn<T>(st.o, pa[kk],
                               wgmma::smem_desc(v_base + kk * 16 * kPanelRowBytes, kPanelBytes, kAtomBytes));
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operands(st.o);
}

}  // namespace flashattn::detail::cuda::decode
