#pragma once

// Host launch code of the attention kernel for one head-dim bucket and cache type, included by
// attention_d{64,128,256}.cu and attention_d{64,128,256}_fp8.cu (one each, so that the instantiations of
// a bucket and cache type compile in their own translation unit). Instantiations: (3 buckets x 4 row
// shapes + 2 buckets x the wide and warpgroup shapes) x 2 dtypes x contiguous or paged, for 16-bit and
// for FP8 caches: 128 kernels (the warpgroup ones hold sm_90a code only).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <mutex>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/decode/attention_kernel.cuh"
#include "cuda/decode/decode.h"
#include "flashattn/error.h"

namespace flashattn::detail::cuda::decode {

// Calls f(TypeTag<T>{}, TypeTag<Tile>{}) for the storage type and tile of (dtype, shape, FP8 cache or not).
template <int kHeadDim, bool kFp8, typename F>
void with_tile(DType dtype, RowShape shape, F&& f) {
  auto for_type = [&](auto type) {
    switch (shape) {
      case RowShape::small:
        f(type, TypeTag<DecodeTile<kHeadDim, row_warps(RowShape::small), key_warps(RowShape::small), false, kFp8>>{});
        return;
      case RowShape::narrow:
        f(type, TypeTag<DecodeTile<kHeadDim, row_warps(RowShape::narrow), key_warps(RowShape::narrow), false, kFp8>>{});
        return;
      case RowShape::medium:
        f(type, TypeTag<DecodeTile<kHeadDim, row_warps(RowShape::medium), key_warps(RowShape::medium), false, kFp8>>{});
        return;
      case RowShape::large:
        f(type, TypeTag<DecodeTile<kHeadDim, row_warps(RowShape::large), key_warps(RowShape::large), false, kFp8>>{});
        return;
      case RowShape::wide:
        if constexpr (kHeadDim <= 128) {
          f(type, TypeTag<DecodeTile<kHeadDim, row_warps(RowShape::wide), key_warps(RowShape::wide), false, kFp8>>{});
          return;
        }
        break;
      case RowShape::warpgroup:
        if constexpr (kHeadDim <= 128) {
          f(type, TypeTag<WarpgroupTile<kHeadDim, kFp8>>{});
          return;
        }
        break;
    }
    throw Error(Status::internal, "flashattn: cuda_decode: no kernel of row shape " + std::to_string(int(shape)) +
                                      " at head dim " + std::to_string(kHeadDim));
  };
  if (dtype == DType::f16)
    for_type(TypeTag<__half>{});
  else if (dtype == DType::bf16)
    for_type(TypeTag<__nv_bfloat16>{});
  else
    throw Error(Status::internal, std::string("flashattn: cuda_decode: dtype ") + dtype_name(dtype) + " has no kernel");
}

// Opts the kernel into its shared memory on `device` and reads its occupancy, once per device.
template <typename T, typename Tile, bool kPaged>
KernelShape prepare_kernel(int device) {
  static std::mutex mutex;
  static std::map<int, int> blocks_per_sm;  // per device
  const auto kernel = decode_attention_kernel<T, Tile, kPaged>;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = blocks_per_sm.find(device);
  if (it == blocks_per_sm.end()) {
    static_assert(Tile::kSmemBytes > kDefaultSmemLimit, "every tile opts in, so the cap below applies to all");
    allow_dynamic_smem(kernel, max_smem_optin(device), device, "cuda_decode attention");
    int blocks = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tile::kThreads, Tile::kSmemBytes));
    it = blocks_per_sm.emplace(device, blocks).first;
  }
  return KernelShape{Tile::kRows, Tile::kBlockN, Tile::kThreads, Tile::kSmemBytes, it->second};
}

template <int kHeadDim, bool kFp8Cache>
KernelShape prepare_attention_for(DType dtype, RowShape shape, bool paged, int device) {
  KernelShape out;
  with_tile<kHeadDim, kFp8Cache>(dtype, shape, [&](auto type, auto tile) {
    using T = typename decltype(type)::type;
    using Tile = typename decltype(tile)::type;
    out = paged ? prepare_kernel<T, Tile, true>(device) : prepare_kernel<T, Tile, false>(device);
  });
  return out;
}

template <int kHeadDim, bool kFp8Cache>
void launch_attention_for(DType dtype, RowShape shape, const KVCacheProblem& p, const DecodeArgs& a, int64_t blocks,
                          size_t smem, bool after_kernel, cudaStream_t stream) {
  with_tile<kHeadDim, kFp8Cache>(dtype, shape, [&](auto type, auto tile) {
    using T = typename decltype(type)::type;
    using Tile = typename decltype(tile)::type;
    const auto kernel =
        p.cache.paged() ? decode_attention_kernel<T, Tile, true> : decode_attention_kernel<T, Tile, false>;
    const bool pdl = after_kernel && pdl_capable(kernel, int(p.device.index));
    launch_kernel(kernel, grid_1d(blocks, "cuda_decode attention"), Tile::kThreads, smem, stream, pdl,
                  "cuda_decode attention", p, a);
  });
}

}  // namespace flashattn::detail::cuda::decode
