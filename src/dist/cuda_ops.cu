// DeviceOps for CUDA tensors: the ring's element-wise loops (host_ops.cpp) as small kernels on the
// caller's stream, with the same semantics. One warp per vector (the contiguous last dim of a view):
// the strided index arithmetic is done once per vector, and the lanes stride over its elements, so each
// warp access is coalesced. Grids are capped and loop over the vectors (grid-stride).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/elem.cuh"
#include "cuda/common/launch.h"
#include "dist/device_ops.h"
#include "dist/lse_merge.h"
#include "flashattn/error.h"

namespace flashattn::dist::detail {

namespace {

using flashattn::detail::cuda::ceil_div;
using flashattn::detail::cuda::DeviceGuard;
using flashattn::detail::cuda::dispatch_dtype;
using flashattn::detail::cuda::from_float;
using flashattn::detail::cuda::to_float;

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;  // 256 threads: a common size that keeps every SM busy
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
// Enough blocks to fill any GPU several times over; larger problems loop (grid-stride).
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

// A strided view as a list of vectors: up to three outer dims (leading ones padded with size 1) over
// a contiguous last dim of `len` elements.
struct Vectors {
  void* data = nullptr;
  int64_t size[3] = {1, 1, 1};
  int64_t stride[3] = {0, 0, 0};
  int64_t len = 0;

  int64_t count() const { return size[0] * size[1] * size[2]; }
  __device__ int64_t offset(int64_t v) const {
    const int64_t i2 = v % size[2];
    v /= size[2];
    return (v / size[1]) * stride[0] + (v % size[1]) * stride[1] + i2 * stride[2];
  }
};

Vectors vectors_of(const Tensor& t, const char* what) {
  // The ring builds every view it passes here; a non-contiguous last dim would be a bug in it.
  if (t.ndim < 1 || t.ndim > 4 || (t.shape[t.ndim - 1] > 1 && t.stride[t.ndim - 1] != 1))
    throw Error(Status::internal, std::string("flashattn::dist: CUDA ") + what +
                                      ": expected a view of 1 to 4 dims with a contiguous last dim, got " +
                                      t.describe());
  Vectors v;
  v.data = t.data;
  v.len = t.shape[t.ndim - 1];
  for (int d = t.ndim - 2, k = 2; d >= 0; --d, --k) {
    v.size[k] = t.shape[d];
    v.stride[k] = t.stride[d];
  }
  return v;
}

// The (batch, row, head) strides of a q-like view (nb, rows, heads, dim) or of an lse-like view
// (nb, heads, rows), in the order (batch, row, head) for both.
struct RowStrides {
  int64_t b = 0, i = 0, h = 0;
};
RowStrides q_like(const Tensor& t) { return {t.stride[0], t.stride[1], t.stride[2]}; }
RowStrides lse_like(const Tensor& t) { return {t.stride[0], t.stride[2], t.stride[1]}; }

__device__ __forceinline__ int64_t at(const RowStrides& s, int64_t b, int64_t i, int64_t h) {
  return b * s.b + i * s.i + h * s.h;
}

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % kWarpSize; }
__device__ __forceinline__ int64_t first_warp() { return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize; }
__device__ __forceinline__ int64_t warp_count() { return int64_t(gridDim.x) * blockDim.x / kWarpSize; }

template <typename T>
__global__ void copy_kernel(Vectors src, Vectors dst, int64_t count) {
  for (int64_t v = first_warp(); v < count; v += warp_count()) {
    const T* s = static_cast<const T*>(src.data) + src.offset(v);
    T* d = static_cast<T*>(dst.data) + dst.offset(v);
    for (int64_t e = lane_id(); e < src.len; e += kWarpSize) d[e] = s[e];
  }
}

template <typename T>
__global__ void fill_kernel(Vectors dst, int64_t count, float value) {
  const T x = from_float<T>(value);
  for (int64_t v = first_warp(); v < count; v += warp_count()) {
    T* d = static_cast<T*>(dst.data) + dst.offset(v);
    for (int64_t e = lane_id(); e < dst.len; e += kWarpSize) d[e] = x;
  }
}

template <typename T>
__global__ void accumulate_kernel(Vectors acc, Vectors part, int64_t count) {
  for (int64_t v = first_warp(); v < count; v += warp_count()) {
    float* a = static_cast<float*>(acc.data) + acc.offset(v);
    const T* p = static_cast<const T*>(part.data) + part.offset(v);
    for (int64_t e = lane_id(); e < acc.len; e += kWarpSize) a[e] += to_float(p[e]);
  }
}

template <typename T>
__global__ void convert_kernel(Vectors src, Vectors dst, int64_t count) {
  for (int64_t v = first_warp(); v < count; v += warp_count()) {
    const float* s = static_cast<const float*>(src.data) + src.offset(v);
    T* d = static_cast<T*>(dst.data) + dst.offset(v);
    for (int64_t e = lane_id(); e < src.len; e += kWarpSize) d[e] = from_float<T>(s[e]);
  }
}

// The operands of merge_partial and finish_forward: one vector per (batch, row, head).
struct RowArgs {
  int64_t rows = 0, heads = 0, dim = 0, count = 0;
  float* acc = nullptr;
  float* acc_lse = nullptr;
  void* other = nullptr;       // merge: the partial out; finish: the caller's out
  float* other_lse = nullptr;  // merge: the partial lse; finish: the caller's lse (may be null)
  RowStrides acc_s, acc_lse_s, other_s, other_lse_s;
};

template <typename T>
__global__ void merge_kernel(RowArgs a) {
  for (int64_t v = first_warp(); v < a.count; v += warp_count()) {
    const int64_t h = v % a.heads, i = (v / a.heads) % a.rows, b = v / (a.heads * a.rows);
    const float lp = a.other_lse[at(a.other_lse_s, b, i, h)];
    if (!(lp < INFINITY)) continue;  // +inf: the row saw no key of this block (warp-uniform branch)
    float* la_at = a.acc_lse + at(a.acc_lse_s, b, i, h);
    const float la = *la_at;
    const LseMerge m = lse_merge(la, lp);
    // While la = -inf the accumulator holds nothing yet (not even a defined value): overwrite it.
    const bool first = la == -INFINITY;
    float* acc = a.acc + at(a.acc_s, b, i, h);
    const T* part = static_cast<const T*>(a.other) + at(a.other_s, b, i, h);
    for (int64_t d = lane_id(); d < a.dim; d += kWarpSize)
      acc[d] = (first ? 0.0f : m.w_acc * acc[d]) + m.w_part * to_float(part[d]);
    __syncwarp();  // every lane has read la before it changes
    if (lane_id() == 0) *la_at = m.lse;
  }
}

template <typename T>
__global__ void finish_kernel(RowArgs a) {
  for (int64_t v = first_warp(); v < a.count; v += warp_count()) {
    const int64_t h = v % a.heads, i = (v / a.heads) % a.rows, b = v / (a.heads * a.rows);
    const float la = a.acc_lse[at(a.acc_lse_s, b, i, h)];
    const bool empty = la == -INFINITY;  // the row saw no key at all
    const float* acc = a.acc + at(a.acc_s, b, i, h);
    T* out = static_cast<T*>(a.other) + at(a.other_s, b, i, h);
    for (int64_t d = lane_id(); d < a.dim; d += kWarpSize) out[d] = from_float<T>(empty ? 0.0f : acc[d]);
    if (lane_id() == 0 && a.other_lse) a.other_lse[at(a.other_lse_s, b, i, h)] = empty ? INFINITY : la;
  }
}

dim3 grid_for(int64_t vectors) { return dim3(unsigned(std::min(kMaxBlocks, ceil_div(vectors, kWarpsPerBlock)))); }

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream); }

// Launches `kernel` over `vectors` warps' worth of work on `stream`.
template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), int64_t vectors, Stream stream, Args... args) {
  kernel<<<grid_for(vectors), kThreads, 0, cuda_stream(stream)>>>(args...);
  FA_CUDA_CHECK_LAUNCH(name);
}

RowArgs row_args(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& other, const Tensor& other_lse) {
  RowArgs a;
  a.rows = acc_out.shape[1];
  a.heads = acc_out.shape[2];
  a.dim = acc_out.shape[3];
  a.count = acc_out.shape[0] * a.rows * a.heads;
  a.acc = static_cast<float*>(acc_out.data);
  a.acc_lse = static_cast<float*>(acc_lse.data);
  a.other = other.data;
  a.other_lse = other_lse.present() ? static_cast<float*>(other_lse.data) : nullptr;
  a.acc_s = q_like(acc_out);
  a.acc_lse_s = lse_like(acc_lse);
  a.other_s = q_like(other);
  if (other_lse.present()) a.other_lse_s = lse_like(other_lse);
  return a;
}

class CudaOps final : public DeviceOps {
 public:
  explicit CudaOps(int index) : device_(Device::cuda(index)) {}

  Buffer allocate(size_t bytes, Stream stream) override {
    if (bytes == 0) return Buffer();
    DeviceGuard guard(device_);
    const cudaStream_t s = cuda_stream(stream);
    void* p = nullptr;
    // Stream-ordered: repeated calls reuse the pool's memory without synchronising the device.
    const cudaError_t err = cudaMallocAsync(&p, bytes, s);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(Status::out_of_memory, "flashattn::dist: could not allocate " + std::to_string(bytes) +
                                             " bytes of ring workspace on " + device_name(device_));
    }
    FA_CUDA_CHECK(err);
    const int index = device_.index;
    // A deleter must not throw: errors of the free surface at the next checked call on the stream.
    return Buffer(p, bytes, [s, index](void* q) {
      int previous = -1;
      cudaGetDevice(&previous);
      if (previous != index) cudaSetDevice(index);
      cudaFreeAsync(q, s);
      if (previous >= 0 && previous != index) cudaSetDevice(previous);
    });
  }

  void to_device(const void* host, void* dst, size_t bytes, Stream stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    FA_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, cuda_stream(stream)));
  }

  void to_host(const void* src, void* host, size_t bytes, Stream stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    FA_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(stream)));
    FA_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)));
  }

  void copy(const Tensor& src, const Tensor& dst, Stream stream) override {
    const Vectors s = vectors_of(src, "copy"), d = vectors_of(dst, "copy");
    if (s.count() == 0 || s.len == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(src.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist copy", copy_kernel<T>, s.count(), stream, s, d, s.count());
    });
  }

  void fill(const Tensor& dst, float value, Stream stream) override {
    const Vectors d = vectors_of(dst, "fill");
    if (d.count() == 0 || d.len == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist fill", fill_kernel<T>, d.count(), stream, d, d.count(), value);
    });
  }

  void merge_partial(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& part_out, const Tensor& part_lse,
                     Stream stream) override {
    const RowArgs a = row_args(acc_out, acc_lse, part_out, part_lse);
    if (a.count == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(part_out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist merge_partial", merge_kernel<T>, a.count, stream, a);
    });
  }

  void finish_forward(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& out, const Tensor& lse,
                      Stream stream) override {
    const RowArgs a = row_args(acc_out, acc_lse, out, lse);
    if (a.count == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist finish_forward", finish_kernel<T>, a.count, stream, a);
    });
  }

  void accumulate(const Tensor& acc, const Tensor& part, Stream stream) override {
    const Vectors a = vectors_of(acc, "accumulate"), p = vectors_of(part, "accumulate");
    if (a.count() == 0 || a.len == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(part.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist accumulate", accumulate_kernel<T>, a.count(), stream, a, p, a.count());
    });
  }

  void convert(const Tensor& src, const Tensor& dst, Stream stream) override {
    const Vectors s = vectors_of(src, "convert"), d = vectors_of(dst, "convert");
    if (s.count() == 0 || s.len == 0) return;
    DeviceGuard guard(device_);
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch("flashattn::dist convert", convert_kernel<T>, s.count(), stream, s, d, s.count());
    });
  }

 private:
  Device device_;
};

int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error of any later call
    return 0;
  }
  return n;
}

}  // namespace

DeviceOps& cuda_ops(int device_index) {
  static const std::vector<std::unique_ptr<CudaOps>> ops = [] {
    std::vector<std::unique_ptr<CudaOps>> v;
    for (int i = 0, n = visible_devices(); i < n; ++i) v.push_back(std::make_unique<CudaOps>(i));
    return v;
  }();
  if (device_index < 0 || device_index >= int(ops.size()))
    throw Error(Status::invalid_argument, "flashattn::dist: device: expected a visible CUDA device (" +
                                              std::to_string(ops.size()) + " visible), got " +
                                              device_name(Device::cuda(device_index)));
  return *ops[size_t(device_index)];
}

}  // namespace flashattn::dist::detail
