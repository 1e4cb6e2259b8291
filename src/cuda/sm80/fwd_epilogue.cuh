#pragma once

// Forward epilogue: O / l rounded to T and stored to `out` in whole 16-byte chunks of rows (a warp's store
// covers whole 32-byte sectors), plus the natural-log LSE of each row. Two ways to get the chunks:
//   staged:     each warp writes its rows into its own rows of the Q tile and reads them back as chunks.
//               No other warp reads those rows (every warp reads only its own Q fragments), so __syncwarp
//               is the only synchronisation.
//   transposed: for the persistent grid (fwd_kernel.cuh), whose Q tile is already receiving the next
//               tile's rows. The four lanes of a quad hold the same row; they transpose their words of four
//               n8 fragments with register shuffles, after which each lane holds 16 contiguous bytes.
// Storing each lane's 4-byte pairs directly (8 rows x 16 bytes per warp store, half of every sector)
// measured 5-19% slower than the staged stores at D = 64 on the H200 (bench/NOTES.md).

#include <cstdint>

#include "cuda/attn/softmax.cuh"
#include "cuda/common/ptx.h"
#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

// Main: the FwdMainloop instance whose accumulators are stored.
template <typename T, typename Main>
struct FwdEpilogue {
  static constexpr int kMFrags = Main::kMFrags;
  static constexpr int kDFrags = Main::kDFrags;
  using QTile = typename Main::QTile;
  static_assert(kDFrags % 4 == 0, "the quad transpose takes four n8 fragments at a time");

  // out_tile: element (0, 0) of the CTA's tile in `out`; lse_tile: the LSE of its first row (rows are
  // contiguous in LseView) or nullptr. valid_rows: rows of the tile inside the sequence; d_chunks: the
  // head dim / 8, the n8 fragments that hold real dims (the bucket's padding is never stored).
  __device__ __forceinline__ static void store_staged(const float (&o)[kMFrags][kDFrags][4], OnlineSoftmax<kMFrags>& sm,
                                                      T* sq, T* out_tile, int64_t out_row_stride, float* lse_tile,
                                                      int valid_rows, int d_chunks, int warp_row0, float keep_scale,
                                                      int lane) {
    sm.reduce_sums();
    __syncwarp();  // this warp's last ldmatrix of its Q rows is done before they are overwritten
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf) {
      const float scale[2] = {sm.out_scale(mf, 0, keep_scale), sm.out_scale(mf, 1, keep_scale)};
      store_acc<T, QTile>(sq, o[mf], warp_row0 + 16 * mf, 0, scale, lane);
    }
    __syncwarp();
    store_rows<QTile, Main::kWarpRows, 32>(out_tile + warp_row0 * out_row_stride, out_row_stride, sq, warp_row0,
                                           valid_rows - warp_row0, d_chunks, lane);
    store_lse(sm, lse_tile, valid_rows, warp_row0, lane);
  }

  // As store_staged, without shared memory.
  __device__ __forceinline__ static void store_transposed(const float (&o)[kMFrags][kDFrags][4],
                                                          OnlineSoftmax<kMFrags>& sm, T* out_tile,
                                                          int64_t out_row_stride, float* lse_tile, int valid_rows,
                                                          int d_chunks, int warp_row0, float keep_scale, int lane) {
    sm.reduce_sums();
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + 16 * mf + g + 8 * half;
        const float scale = sm.out_scale(mf, half, keep_scale);
        T* out_row = out_tile + row * out_row_stride;
#pragma unroll
        for (int quad = 0; quad < kDFrags / 4; ++quad) {
          uint32_t w[4];  // w[f]: this lane's 2 columns of n8 fragment 4 quad + f
#pragma unroll
          for (int f = 0; f < 4; ++f)
            w[f] = ptx::pack2<T>(o[mf][4 * quad + f][2 * half] * scale, o[mf][4 * quad + f][2 * half + 1] * scale);
          transpose_quad(w, c);  // now w[j]: columns 2j, 2j + 1 of fragment 4 quad + c
          const int frag = 4 * quad + c;
          if (row < valid_rows && frag < d_chunks)
            *reinterpret_cast<uint4*>(out_row + 8 * frag) = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    store_lse(sm, lse_tile, valid_rows, warp_row0, lane);
  }

 private:
  // The 4 x 4 transpose of the quad's words: lane c's w[f] becomes lane f's w[c]. Stage s exchanges, with
  // lane c ^ s, the words whose index differs from c in bit s (one shuffle per pair of such words); after
  // stage s, lane c holds at index f the word of lane c ^ d at index f ^ d, d = (f ^ c) & (bits done).
  __device__ __forceinline__ static void transpose_quad(uint32_t (&w)[4], int c) {
#pragma unroll
    for (int s = 1; s <= 2; s <<= 1) {
      const bool upper = (c & s) != 0;
#pragma unroll
      for (int f0 = 0; f0 < 4; ++f0) {
        if (f0 & s) continue;
        const int f1 = f0 | s;  // upper lanes send and replace w[f0], lower lanes w[f1]
        const uint32_t got = __shfl_xor_sync(0xffffffffu, upper ? w[f0] : w[f1], s);
        if (upper)
          w[f0] = got;
        else
          w[f1] = got;
      }
    }
  }

  __device__ __forceinline__ static void store_lse(const OnlineSoftmax<kMFrags>& sm, float* lse_tile, int valid_rows,
                                                   int warp_row0, int lane) {
    if (lse_tile == nullptr || (lane & 3) != 0) return;
#pragma unroll
    for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + 16 * mf + (lane >> 2) + 8 * half;
        if (row < valid_rows) lse_tile[row] = sm.lse(mf, half);
      }
  }
};

}  // namespace flashattn::detail::cuda::sm80
