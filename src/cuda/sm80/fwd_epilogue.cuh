#pragma once

// Forward epilogue: O / l rounded to T and staged through shared memory so that the global stores are
// whole 16-byte chunks of rows (coalesced), plus the natural-log LSE of each row.
//
// Each warp stages and stores only its own rows, in its own rows of the Q tile: no other warp reads
// those rows (every warp reads only its own Q fragments), so __syncwarp is the only synchronisation.

#include <cstdint>

#include "cuda/sm80/fragments.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::detail::cuda::sm80 {

// Main: the FwdMainloop instance whose accumulators are stored.
template <typename T, typename Main>
struct FwdEpilogue {
  static constexpr int kMFrags = Main::kMFrags;
  static constexpr int kDFrags = Main::kDFrags;
  using QTile = typename Main::QTile;

  // out_tile: element (0, 0) of the CTA's tile in `out`; lse_tile: the LSE of its first row (rows are
  // contiguous in LseView) or nullptr. valid_rows: rows of the tile inside the sequence.
  __device__ __forceinline__ static void store(const float (&o)[kMFrags][kDFrags][4], OnlineSoftmax<kMFrags>& sm, T* sq,
                                               T* out_tile, int64_t out_row_stride, float* lse_tile, int valid_rows,
                                               int d_chunks, int warp_row0, float keep_scale, int lane) {
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
    if (lse_tile != nullptr && (lane & 3) == 0) {
#pragma unroll
      for (int mf = 0; mf < kMFrags; ++mf)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp_row0 + 16 * mf + (lane >> 2) + 8 * half;
          if (row < valid_rows) lse_tile[row] = sm.lse(mf, half);
        }
    }
  }
};

}  // namespace flashattn::detail::cuda::sm80
