#pragma once

// Owning test buffers: HostTensor lives on the host; DeviceTensor holds a copy on the device a backend
// runs on (the host itself for CPU backends, CUDA memory for CUDA backends).

#include <cstdint>
#include <random>
#include <vector>

#include "flashattn/tensor.h"

namespace fa_test {

using flashattn::Device;
using flashattn::DType;
using flashattn::Tensor;

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);

  bool present() const { return !shape_.empty(); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t nbytes() const { return bytes_.size(); }
  Tensor view() const;  // contiguous view on the CPU (absent when !present())

  // Values drawn from N(0, stddev^2), rounded to the dtype.
  void fill_normal(std::mt19937_64& rng, double stddev = 1.0);
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);
  void fill(double value);
  void poison();  // NaN for float dtypes, INT32_MIN for i32: shows unwritten elements

  double get(int64_t i) const;
  void set(int64_t i, double value);
  std::vector<double> to_double() const;
  HostTensor as(DType dtype) const;  // converted copy (rounding when narrowing)
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes_.data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(bytes_.data()); }

 private:
  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_;
};

// Same size and the same bytes: for results that must be bit-identical.
bool bitwise_equal(const HostTensor& a, const HostTensor& b);

HostTensor i32_tensor(const std::vector<int32_t>& values);
HostTensor i32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape);

// A copy of a HostTensor on `device`; on the CPU it owns host memory, on CUDA device memory.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const HostTensor& host, Device device);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  Tensor view() const;
  HostTensor download() const;

 private:
  void release();
  HostTensor meta_;  // shape and dtype (and the data itself on the CPU)
  Device device_{};
  void* device_ptr_ = nullptr;
};

// True when CUDA backends can run here (built with CUDA and a device is visible).
bool cuda_available();
// Waits for all work on the default CUDA stream (no-op without CUDA).
void device_synchronize(Device device);

}  // namespace fa_test
