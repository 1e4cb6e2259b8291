// TMA tensor maps (tensor_map.h).

#include "cuda/sm90/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "flashattn/error.h"

namespace flashattn::detail::cuda::sm90 {

namespace {

constexpr int64_t kStrideLimit = int64_t(1) << 40;  // cuTensorMapEncodeTiled: strides below 2^40 bytes

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || f == nullptr) {
      cudaGetLastError();  // not sticky: clear it for the caller's next CUDA call
      throw Error(Status::internal, "flashattn: cuda_sm90: the driver has no cuTensorMapEncodeTiled (CUDA 12.0+)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

std::string tma_view_reason(const RowsView& v, int64_t elem_bytes, int64_t rows, int64_t heads, int64_t batch,
                            const char* name) {
  if (reinterpret_cast<uintptr_t>(v.ptr) % 16 != 0)
    return std::string(name) + ": data pointer not 16-byte aligned (TMA)";
  for (const auto& [stride, size, what] :
       {std::tuple{v.row_stride, rows, "row"}, std::tuple{v.head_stride, heads, "head"},
        std::tuple{v.batch_stride, batch, "batch"}}) {
    if (size <= 1) continue;
    const int64_t bytes = stride * elem_bytes;
    if (bytes % 16 != 0 || bytes <= 0 || bytes >= kStrideLimit)
      return std::string(name) + ": " + what + " stride " + std::to_string(stride) +
             " elements is not a positive multiple of 16 bytes below 2^40 (TMA)";
  }
  return {};
}

CUtensorMap make_rows_map(const RowsView& v, DType dtype, int64_t head_dim, int64_t rows, int64_t heads, int64_t batch,
                          int box_rows) {
  // 16-bit elements, or e4m3 bytes (the FP8 forward): a box row is one 128-byte swizzle span either way.
  const bool fp8 = dtype == DType::fp8_e4m3;
  const int64_t elem = fp8 ? 1 : 2;
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(std::max<int64_t>(rows, 1)),
                              cuuint64_t(std::max<int64_t>(heads, 1)), cuuint64_t(std::max<int64_t>(batch, 1))};
  // A dim of size 1 is never stepped over, but the driver still checks its stride (a multiple of 16 below
  // 2^40); a batch of one may carry any stride there (0, say), so such a dim gets 16 bytes.
  int64_t strides[3] = {v.row_stride * elem, v.head_stride * elem, v.batch_stride * elem};
  for (int i = 0; i < 3; ++i)
    if (dims[i + 1] == 1) strides[i] = 16;
  const cuuint64_t byte_strides[3] = {cuuint64_t(strides[0]), cuuint64_t(strides[1]), cuuint64_t(strides[2])};
  const cuuint32_t box[4] = {cuuint32_t(128 / elem), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r =
      encode_tiled()(&map,
                     fp8                    ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                     : dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                     4, v.ptr, dims, byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(Status::internal, "flashattn: cuda_sm90: cuTensorMapEncodeTiled failed (CUresult " +
                                      std::to_string(int(r)) + ") for a (" + std::to_string(head_dim) + ", " +
                                      std::to_string(rows) + ", " + std::to_string(heads) + ", " +
                                      std::to_string(batch) + ") view");
  return map;
}

}  // namespace flashattn::detail::cuda::sm90
