#pragma once

// The element-wise work of ring attention that is not attention itself: copying K/V into the travelling
// buffers, merging partial (out, lse) pairs, accumulating gradients in fp32. One implementation per
// device type (host_ops.cpp: OpenMP loops; cuda_ops.cu: kernels on `stream`, in builds with CUDA); the
// ring code is written once against this interface. Work is ordered on `stream` (ignored on the host).
//
// Tensors are strided views whose last dimension is contiguous. Shapes follow the ring's batched
// convention: q-like (nb, rows, heads, dim), lse-like (nb, heads, rows).

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

#include "flashattn/params.h"
#include "flashattn/tensor.h"

namespace flashattn::dist::detail {

// Device memory owned by the ring for the duration of one call. `release` may capture what the free
// needs (the stream of a stream-ordered allocation).
class Buffer {
 public:
  using Release = std::function<void(void*)>;
  Buffer() = default;
  Buffer(void* data, size_t bytes, Release release) : data_(data, std::move(release)), bytes_(bytes) {}
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, Release> data_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // Memory usable by work on `stream` from now on; released in stream order when the Buffer dies, so
  // work still queued on `stream` may use it until then (other streams must be ordered before `stream`).
  virtual Buffer allocate(size_t bytes, Stream stream) = 0;
  // Byte copies between host memory and this device; to_host returns once `host` holds the bytes (it
  // waits for the work queued on `stream` before the copy).
  virtual void to_device(const void* host, void* dst, size_t bytes, Stream stream) = 0;
  virtual void to_host(const void* src, void* host, size_t bytes, Stream stream) = 0;
  // dst = src; same dtype and shape.
  virtual void copy(const Tensor& src, const Tensor& dst, Stream stream) = 0;
  // Every element of `dst` (any float dtype) = value.
  virtual void fill(const Tensor& dst, float value, Stream stream) = 0;
  // Folds one partial attention result into the running one (fp32), row by row:
  //   lse = log(exp(acc_lse) + exp(part_lse)), acc_out = exp(acc_lse - lse) acc_out + exp(part_lse - lse) part_out.
  // acc_lse starts at -inf (nothing seen), and acc_out is not read where it is -inf, so it needs no
  // initial value; a part_lse of +inf (a row that saw no key) contributes nothing.
  virtual void merge_partial(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& part_out,
                             const Tensor& part_lse, Stream stream) = 0;
  // Writes the merged result: out (its dtype) and lse (optional). A row that saw no key at all gets
  // out 0 and lse +inf, as a plain call does.
  virtual void finish_forward(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& out, const Tensor& lse,
                              Stream stream) = 0;
  // acc (fp32) += part (any float dtype).
  virtual void accumulate(const Tensor& acc, const Tensor& part, Stream stream) = 0;
  // dst (its dtype) = src (fp32), rounded.
  virtual void convert(const Tensor& src, const Tensor& dst, Stream stream) = 0;
};

// The implementation for tensors on `device`; throws Error(unsupported) for a device without one (CUDA
// in a build without CUDA) and Error(invalid_argument) for a CUDA device index that does not exist.
DeviceOps& device_ops(Device device);

// The implementations device_ops chooses from (device_ops.cpp).
DeviceOps& host_ops();
#if defined(FLASHATTN_WITH_CUDA)
DeviceOps& cuda_ops(int device_index);
#endif

}  // namespace flashattn::dist::detail
