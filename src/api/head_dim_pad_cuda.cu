// The CUDA copier of head-dim padding (head_dim_pad.h): one small grid-stride kernel per region and
// direction, on the call's stream, so the copies are ordered with the kernels of the call around them and
// are legal inside CUDA graph capture. A kernel (rather than cudaMemcpy2DAsync) takes the caller's three
// strides as they are: a (batch, row, head) view does not collapse into one pitch in general.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "api/head_dim_pad.h"
#include "api/head_dim_pad_kernels.cuh"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/workspace.h"
#include "cuda/sm70/image.h"

namespace flashattn::detail {

namespace {

template <typename T>
__global__ void pad_kernel(const T* __restrict__ src, T* __restrict__ dst, RegionShape s, int64_t n) {
  pad_elements(src, dst, s, n);
}
template <typename T>
__global__ void unpad_kernel(const T* __restrict__ src, T* __restrict__ dst, RegionShape s, int64_t n) {
  unpad_elements(src, dst, s, n);
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
      run<T>(reinterpret_cast<const void*>(pad_kernel<T>), "flashattn_sm70_pad_b16", blocks, r.caller.ptr, dst, s, n);
    });
  }
  void unpad(const PadPlan& plan, const PadRegion& r, const void* src) override {
    launch(plan, r, r.elements(plan.head_dim), [&](auto zero, int blocks, RegionShape s, int64_t n) {
      using T = decltype(zero);
      run<T>(reinterpret_cast<const void*>(unpad_kernel<T>), "flashattn_sm70_unpad_b16", blocks, src, r.caller.ptr, s,
             n);
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

  // Launches `compiled`, or on a device that runs cuda_sm70's sm_70 image (a Volta GPU: this library's
  // compiled kernels need sm_80) the image's 16-bit copy `image_name`, the same code.
  template <typename T>
  void run(const void* compiled, const char* image_name, int blocks, const void* from, void* to, RegionShape s,
           int64_t n) {
    void* params[] = {&from, &to, &s, &n};
    cuda::sm70::launch_kernel(compiled, sizeof(T) == 2 ? image_name : nullptr, int(device_.index), dim3(blocks),
                              dim3(kThreads), 0, params, stream_, "head-dim padding copy");
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
