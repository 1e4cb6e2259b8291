// The CUDA copier of head-dim padding (head_dim_pad.h): one small grid-stride kernel per region and
// direction, on the call's stream, so the copies are ordered with the kernels of the call around them and
// are legal inside CUDA graph capture. A kernel (rather than cudaMemcpy2DAsync) takes the caller's three
// strides as they are: a (batch, row, head) view does not collapse into one pitch in general.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "api/head_dim_pad.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/workspace.h"

namespace flashattn::detail {

namespace {

// Strides of the caller's (batches, rows, heads, dim) region; element (b, r, h, d) of the dense padded copy
// is at ((b * rows + r) * heads + h) * padded + d.
struct RegionShape {
  int64_t batch_stride, row_stride, head_stride;
  int64_t rows, heads;
  int64_t dim, padded;
};

__device__ __forceinline__ int64_t caller_row(const RegionShape& s, int64_t dense_row) {
  const int64_t h = dense_row % s.heads, br = dense_row / s.heads;
  return (br / s.rows) * s.batch_stride + (br % s.rows) * s.row_stride + h * s.head_stride;
}

// Thread per element of the padded copy: the caller's value in columns [0, dim), 0 in [dim, padded).
template <typename T>
__global__ void pad_kernel(const T* __restrict__ src, T* __restrict__ dst, RegionShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % s.padded, row = i / s.padded;
    dst[i] = d < s.dim ? src[caller_row(s, row) + d] : T(0);
  }
}

// Thread per element of the caller's region: columns [0, dim) of the padded copy back.
template <typename T>
__global__ void unpad_kernel(const T* __restrict__ src, T* __restrict__ dst, RegionShape s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % s.dim, row = i / s.dim;
    dst[caller_row(s, row) + d] = src[row * s.padded + d];
  }
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond: enough blocks to fill any current GPU

int blocks_for(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)); }

RegionShape shape_of(const PadPlan& plan, const PadRegion& r) {
  return RegionShape{r.caller.batch_stride, r.caller.row_stride, r.caller.head_stride, r.rows, r.heads,
                     plan.head_dim,         plan.padded};
}

class CudaPadCopier final : public PadCopier {
 public:
  CudaPadCopier(Device device, Stream stream, void* (*allocator)(size_t, void*), void* context)
      : device_(device), stream_(static_cast<cudaStream_t>(stream)), allocator_(allocator), context_(context) {}

  void* allocate(size_t bytes) override {
    cuda::DeviceGuard guard(device_);
    workspace_.emplace(bytes, stream_, allocator_, context_);
    return workspace_->as<void>();
  }
  void pad(const PadPlan& plan, const PadRegion& r, void* dst) override {
    launch(plan, r, r.elements(plan.padded), [&](auto zero, int blocks, RegionShape s, int64_t n) {
      using T = decltype(zero);
      pad_kernel<T><<<blocks, kThreads, 0, stream_>>>(static_cast<const T*>(r.caller.ptr), static_cast<T*>(dst), s, n);
    });
  }
  void unpad(const PadPlan& plan, const PadRegion& r, const void* src) override {
    launch(plan, r, r.elements(plan.head_dim), [&](auto zero, int blocks, RegionShape s, int64_t n) {
      using T = decltype(zero);
      unpad_kernel<T>
          <<<blocks, kThreads, 0, stream_>>>(static_cast<const T*>(src), static_cast<T*>(r.caller.ptr), s, n);
    });
  }

 private:
  // The elements are moved as raw bits (no conversion), by their size: f32 as 4 bytes, f16/bf16 as 2.
  template <typename Launch>
  void launch(const PadPlan& plan, const PadRegion& r, int64_t n, Launch&& body) {
    if (n == 0) return;
    cuda::DeviceGuard guard(device_);
    if (dtype_size(plan.dtype) == 4)
      body(uint32_t(0), blocks_for(n), shape_of(plan, r), n);
    else
      body(uint16_t(0), blocks_for(n), shape_of(plan, r), n);
    FA_CUDA_CHECK_LAUNCH("head-dim padding copy");
  }

  Device device_;
  cudaStream_t stream_;
  void* (*allocator_)(size_t, void*);
  void* context_;
  std::optional<cuda::Workspace> workspace_;
};

}  // namespace

std::unique_ptr<PadCopier> make_cuda_pad_copier(Device device, Stream stream, void* (*allocator)(size_t, void*),
                                                void* context) {
  return std::make_unique<CudaPadCopier>(device, stream, allocator, context);
}

}  // namespace flashattn::detail
